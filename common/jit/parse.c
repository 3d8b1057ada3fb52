// SPDX-License-Identifier: MIT
//
// parse: an expression's text -> one AST, by recursive descent.
//
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := ('-' | '+') unary | primary
//   primary := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
//
// Operators associate to the left, as in C and Python; '-x * y' is (-x) * y.
// Invariant: every failure names what was expected and where, with the
// column and a caret under the offending token, and leaves no AST behind.
// The text never reaches a shell or a compiler: the generators write C from
// the AST, in which a name is one the caller declared and a number is a
// double. Nesting is bounded (CTI_JIT_MAX_DEPTH), so no input can exhaust
// the stack; the text is bounded by CT_JIT_MAX_EXPR.
#define _POSIX_C_SOURCE 200809L // strnlen
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jit_impl.h"

static const struct {
  const char *name;
  int arity;
} funcs[CTI_JIT_NUM_FUNCS] = {
    [CTI_JIT_EXP] = {"exp", 1},         [CTI_JIT_LOG] = {"log", 1},   [CTI_JIT_SQRT] = {"sqrt", 1},
    [CTI_JIT_TANH] = {"tanh", 1},       [CTI_JIT_SIGMOID] = {"sigmoid", 1},
    [CTI_JIT_RELU] = {"relu", 1},       [CTI_JIT_ABS] = {"abs", 1},   [CTI_JIT_MIN] = {"min", 2},
    [CTI_JIT_MAX] = {"max", 2},         [CTI_JIT_POW] = {"pow", 2},
};
const char *cti_jit_func_name(cti_jit_func f) { return (unsigned)f < CTI_JIT_NUM_FUNCS ? funcs[f].name : "?"; }
int cti_jit_func_arity(cti_jit_func f) { return (unsigned)f < CTI_JIT_NUM_FUNCS ? funcs[f].arity : 0; }

// ---- the caret -----------------------------------------------------------------
// Shows at most this many columns of the expression around the error.
#define WINDOW 72

int cti_jit_fail_at(int status, const char *text, int pos, int len, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const int n = (int)strlen(text);
  if (pos > n) pos = n;
  if (len < 1) len = 1;
  // The window [lo, hi) of the text shown; one byte is one column, since
  // every byte that is not printable ASCII is shown as '?'.
  int lo = 0, hi = n;
  if (n > WINDOW) {
    lo = pos - WINDOW / 2 < 0 ? 0 : pos - WINDOW / 2;
    hi = lo + WINDOW < n ? lo + WINDOW : n;
  }
  if (len > hi - pos) len = hi - pos > 1 ? hi - pos : 1;
  char line[WINDOW + 8], mark[WINDOW + 8];
  int k = 0;
  if (lo > 0) line[k++] = '.', line[k++] = '.', line[k++] = '.';
  const int shift = k;
  for (int i = lo; i < hi; ++i) {
    unsigned char c = (unsigned char)text[i];
    line[k++] = c == '\t' || c == '\n' || c == '\r' ? ' ' : (c >= 0x20 && c < 0x7f ? (char)c : '?');
  }
  if (hi < n) line[k++] = '.', line[k++] = '.', line[k++] = '.';
  line[k] = '\0';
  int m = 0;
  for (int i = 0; i < shift + pos - lo; ++i) mark[m++] = ' ';
  mark[m++] = '^';
  for (int i = 1; i < len; ++i) mark[m++] = '~';
  mark[m] = '\0';
  // "<op>: column C: <what>", the expression, the caret.
  const char *colon = strstr(msg, ": ");
  const int oplen = colon ? (int)(colon - msg) : 0;
  return ct_fail((ct_status)status, "%.*s%scolumn %d: %s\n  %s\n  %s", oplen, msg, colon ? ": " : "", pos + 1,
                 colon ? colon + 2 : msg, line, mark);
}

// ---- names ---------------------------------------------------------------------
// Words the generated C or CUDA source cannot take as a parameter's name:
// keywords of C and C++, CUDA's built-in variables, the type and function
// names the generated code uses.
static const char *const reserved[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "alignas", "alignof", "and", "and_eq", "asm", "bitand", "bitor", "bool",
    "catch", "char16_t", "char32_t", "class", "compl", "constexpr", "const_cast", "decltype",
    "delete", "dynamic_cast", "explicit", "export", "false", "friend", "mutable", "namespace", "new",
    "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected",
    "public", "reinterpret_cast", "static_assert", "static_cast", "template", "this",
    "thread_local", "throw", "true", "try", "typeid", "typename", "using", "virtual", "wchar_t",
    "xor", "xor_eq", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "int32_t",
    "int64_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "memcpy", "expf", "logf", "sqrtf",
    "tanhf", "fabs", "fabsf", "powf", "main", "errno"};

static bool is_func_name(const char *s, int n) {
  for (int f = 0; f < CTI_JIT_NUM_FUNCS; ++f)
    if ((int)strlen(funcs[f].name) == n && strncmp(funcs[f].name, s, (size_t)n) == 0) return true;
  return false;
}

// Why `name` cannot be declared, or NULL when it can.
static const char *bad_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0) return "is empty";
  if (n >= CTI_JIT_NAME_MAX) return "is too long (31 characters at most)";
  if (!(isalpha((unsigned char)name[0]))) return "must start with a letter";
  for (size_t i = 1; i < n; ++i)
    if (!isalnum((unsigned char)name[i]) && name[i] != '_') return "may hold only letters, digits and '_'";
  if (is_func_name(name, (int)n)) return "is the name of a function";
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; ++i)
    if (strcmp(reserved[i], name) == 0) return "is reserved in the generated C/CUDA source";
  if (!strncmp(name, "jit_", 4) || !strncmp(name, "ct_", 3) || !strncmp(name, "in_", 3))
    return "starts with a prefix the generated source uses (jit_, ct_, in_)";
  bool caps = n > 1;
  for (size_t i = 0; i < n && caps; ++i) caps = !islower((unsigned char)name[i]);
  if (caps) return "is all capitals, as the macros of C headers are";
  return NULL;
}

// Splits "x, y,z" into names; what = "inputs" or "scalars" for messages.
static int parse_names(const char *op, const char *what, const char *list, int max,
                       char names[][CTI_JIT_NAME_MAX], int *count) {
  *count = 0;
  if (!list) return CT_OK;
  const char *p = list;
  while (*p == ' ' || *p == '\t') ++p;
  if (!*p) return CT_OK;
  for (;;) {
    const char *start = p;
    while (*p && *p != ',') ++p;
    const char *end = p;
    while (start < end && (*start == ' ' || *start == '\t')) ++start;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t')) --end;
    if (*count == max)
      return ct_fail(CT_ERR_VALUE, "%s: at most %d %s, got more in \"%s\"", op, max, what, list);
    char name[64];
    size_t n = (size_t)(end - start);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, start, n);
    name[n] = '\0';
    const char *why = bad_name(name);
    if (why)
      return ct_fail(CT_ERR_VALUE, "%s: %s \"%s\": the name \"%s\" %s", op, what, list, name, why);
    strcpy(names[(*count)++], name);
    if (!*p) return CT_OK;
    ++p; // the comma
  }
}

// ---- the parser -------------------------------------------------------------------
typedef struct parser {
  const char *op, *s;
  int i, depth;
  cti_jit_ast *ast;
} parser;

static void skip_space(parser *P) {
  while (P->s[P->i] == ' ' || P->s[P->i] == '\t' || P->s[P->i] == '\n' || P->s[P->i] == '\r') P->i++;
}

// The current token's length, for the caret: a name or number's run of
// characters, else one character.
static int token_len(const parser *P, int at) {
  const char *s = P->s;
  int j = at;
  if (isalnum((unsigned char)s[j]) || s[j] == '_' || s[j] == '.') {
    while (isalnum((unsigned char)s[j]) || s[j] == '_' || s[j] == '.') ++j;
    return j - at;
  }
  return 1;
}

// A description of what is at position `at`, for "expected X, found Y".
static const char *found_what(const parser *P, int at, char *buf, size_t n) {
  unsigned char c = (unsigned char)P->s[at];
  if (!c) return "the end of the expression";
  if (c >= 0x20 && c < 0x7f) {
    int len = token_len(P, at);
    snprintf(buf, n, "'%.*s'", len > 24 ? 24 : len, P->s + at);
  } else {
    snprintf(buf, n, "the byte 0x%02x", c);
  }
  return buf;
}

static int add_node(parser *P, cti_jit_node nd) {
  cti_jit_ast *A = P->ast;
  if (A->n == A->cap) {
    int cap = A->cap ? 2 * A->cap : 16;
    cti_jit_node *p = realloc(A->nodes, (size_t)cap * sizeof *p);
    if (!p) {
      ct_fail(CT_ERR_OOM, "%s: out of memory", P->op);
      return -1;
    }
    A->nodes = p;
    A->cap = cap;
  }
  A->nodes[A->n] = nd;
  return A->n++;
}

static cti_jit_node node(cti_jit_kind k, int a, int b, int pos, int len) {
  cti_jit_node nd;
  memset(&nd, 0, sizeof nd);
  nd.kind = k;
  nd.a = a;
  nd.b = b;
  nd.pos = pos;
  nd.len = len;
  return nd;
}

static int parse_expr(parser *P);

static int enter(parser *P) {
  if (++P->depth > CTI_JIT_MAX_DEPTH) {
    cti_jit_fail_at(CT_ERR_VALUE, P->s, P->i, 1, "%s: the expression nests more than %d levels deep", P->op,
                    CTI_JIT_MAX_DEPTH);
    return -1;
  }
  return 0;
}

static int parse_number(parser *P) {
  const char *s = P->s;
  int start = P->i, j = P->i, digits = 0;
  while (isdigit((unsigned char)s[j])) ++j, ++digits;
  if (s[j] == '.') {
    ++j;
    while (isdigit((unsigned char)s[j])) ++j, ++digits;
  }
  if (digits == 0)
    return cti_jit_fail_at(CT_ERR_VALUE, s, start, 1, "%s: a number needs a digit", P->op), -1;
  if (s[j] == 'e' || s[j] == 'E') {
    int k = j + 1;
    if (s[k] == '+' || s[k] == '-') ++k;
    if (!isdigit((unsigned char)s[k]))
      return cti_jit_fail_at(CT_ERR_VALUE, s, start, k - start + 1,
                             "%s: the exponent of a number needs a digit", P->op), -1;
    while (isdigit((unsigned char)s[k])) ++k;
    j = k;
  }
  if (isalpha((unsigned char)s[j]) || s[j] == '_' || s[j] == '.')
    return cti_jit_fail_at(CT_ERR_VALUE, s, start, token_len(P, start),
                           "%s: '%.*s' is not a number", P->op, token_len(P, start) > 24 ? 24 : token_len(P, start),
                           s + start), -1;
  char buf[128];
  if (j - start >= (int)sizeof buf)
    return cti_jit_fail_at(CT_ERR_VALUE, s, start, j - start, "%s: a number of more than %d characters", P->op,
                           (int)sizeof buf - 1), -1;
  memcpy(buf, s + start, (size_t)(j - start));
  buf[j - start] = '\0';
  errno = 0;
  double v = strtod(buf, NULL);
  if (!isfinite(v))
    return cti_jit_fail_at(CT_ERR_VALUE, s, start, j - start, "%s: the number %s is out of range", P->op, buf),
           -1;
  cti_jit_node nd = node(CTI_JIT_NUMBER, -1, -1, start, j - start);
  nd.value = v;
  P->i = j;
  return add_node(P, nd);
}

static int lookup(char names[][CTI_JIT_NAME_MAX], int n, const char *s, int len) {
  for (int k = 0; k < n; ++k)
    if ((int)strlen(names[k]) == len && strncmp(names[k], s, (size_t)len) == 0) return k;
  return -1;
}

// "x, y and z", "no inputs"
static void list_names(char *buf, size_t n, char names[][CTI_JIT_NAME_MAX], int count) {
  buf[0] = '\0';
  size_t used = 0;
  for (int k = 0; k < count && used < n; ++k)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", k == 0 ? "" : k == count - 1 ? " and " : ", ",
                             names[k]);
}

static int parse_call(parser *P, int start, int len) {
  cti_jit_ast *A = P->ast;
  int f = -1;
  for (int k = 0; k < CTI_JIT_NUM_FUNCS; ++k)
    if ((int)strlen(funcs[k].name) == len && strncmp(funcs[k].name, P->s + start, (size_t)len) == 0) f = k;
  if (f < 0) {
    const char *hint = lookup(A->input, A->n_inputs, P->s + start, len) >= 0 ||
                               lookup(A->scalar, A->n_scalars, P->s + start, len) >= 0
                           ? " (it is a variable, not a function)"
                           : "";
    return cti_jit_fail_at(CT_ERR_VALUE, P->s, start, len,
                           "%s: unknown function '%.*s'%s; the functions are exp, log, sqrt, tanh, sigmoid, "
                           "relu, abs, min, max, pow", P->op, len, P->s + start, hint), -1;
  }
  P->i++; // '('
  int args[2] = {-1, -1}, nargs = 0;
  skip_space(P);
  if (P->s[P->i] != ')') {
    for (;;) {
      int a = parse_expr(P);
      if (a < 0) return -1;
      if (nargs < 2) args[nargs] = a;
      ++nargs;
      skip_space(P);
      if (P->s[P->i] == ',') {
        P->i++;
        continue;
      }
      break;
    }
  }
  skip_space(P);
  if (P->s[P->i] != ')') {
    char buf[48];
    return cti_jit_fail_at(CT_ERR_VALUE, P->s, P->i, token_len(P, P->i),
                           "%s: expected ',' or ')' in the call of %s at column %d, found %s", P->op, funcs[f].name,
                           start + 1, found_what(P, P->i, buf, sizeof buf)), -1;
  }
  P->i++;
  if (nargs != funcs[f].arity)
    return cti_jit_fail_at(CT_ERR_VALUE, P->s, start, len, "%s: %s takes %d argument%s, got %d", P->op,
                           funcs[f].name, funcs[f].arity, funcs[f].arity == 1 ? "" : "s", nargs), -1;
  cti_jit_node nd = node(CTI_JIT_CALL, args[0], args[1], start, len);
  nd.func = (cti_jit_func)f;
  return add_node(P, nd);
}

static int parse_name(parser *P) {
  cti_jit_ast *A = P->ast;
  const char *s = P->s;
  int start = P->i, j = P->i;
  while (isalnum((unsigned char)s[j]) || s[j] == '_') ++j;
  int len = j - start;
  P->i = j;
  skip_space(P);
  if (s[P->i] == '(') return parse_call(P, start, len);
  int k = lookup(A->input, A->n_inputs, s + start, len);
  if (k >= 0) {
    cti_jit_node nd = node(CTI_JIT_INPUT, -1, -1, start, len);
    nd.index = k;
    return add_node(P, nd);
  }
  k = lookup(A->scalar, A->n_scalars, s + start, len);
  if (k >= 0) {
    cti_jit_node nd = node(CTI_JIT_SCALAR, -1, -1, start, len);
    nd.index = k;
    return add_node(P, nd);
  }
  if (is_func_name(s + start, len))
    return cti_jit_fail_at(CT_ERR_VALUE, s, start, len, "%s: '%.*s' is a function: write %.*s(...)", P->op, len,
                           s + start, len, s + start), -1;
  char in[160], sc[160];
  list_names(in, sizeof in, A->input, A->n_inputs);
  list_names(sc, sizeof sc, A->scalar, A->n_scalars);
  return cti_jit_fail_at(CT_ERR_VALUE, s, start, len, "%s: unknown name '%.*s'; the inputs are %s%s%s", P->op,
                         len > 32 ? 32 : len, s + start, in, A->n_scalars ? " and the scalars " : "",
                         A->n_scalars ? sc : ""), -1;
}

static int parse_primary(parser *P) {
  skip_space(P);
  const char *s = P->s;
  unsigned char c = (unsigned char)s[P->i];
  if (isdigit(c) || c == '.') return parse_number(P);
  if (isalpha(c) || c == '_') return parse_name(P);
  if (c == '(') {
    int open = P->i++;
    if (enter(P)) return -1;
    int e = parse_expr(P);
    if (e < 0) return -1;
    P->depth--;
    skip_space(P);
    if (s[P->i] != ')') {
      char buf[48];
      return cti_jit_fail_at(CT_ERR_VALUE, s, P->i, token_len(P, P->i),
                             "%s: expected ')' to close the '(' at column %d, found %s", P->op, open + 1,
                             found_what(P, P->i, buf, sizeof buf)), -1;
    }
    P->i++;
    return e;
  }
  char buf[48];
  return cti_jit_fail_at(CT_ERR_VALUE, s, P->i, token_len(P, P->i),
                         "%s: expected a number, a name or '(', found %s", P->op,
                         found_what(P, P->i, buf, sizeof buf)), -1;
}

static int parse_unary(parser *P) {
  skip_space(P);
  char c = P->s[P->i];
  if (c == '-' || c == '+') {
    int pos = P->i++;
    if (enter(P)) return -1;
    int a = parse_unary(P);
    if (a < 0) return -1;
    P->depth--;
    return c == '+' ? a : add_node(P, node(CTI_JIT_NEG, a, -1, pos, 1));
  }
  return parse_primary(P);
}

static int parse_term(parser *P) {
  int a = parse_unary(P);
  for (;;) {
    if (a < 0) return -1;
    skip_space(P);
    char c = P->s[P->i];
    if (c != '*' && c != '/') return a;
    int pos = P->i++;
    int b = parse_unary(P);
    if (b < 0) return -1;
    a = add_node(P, node(c == '*' ? CTI_JIT_MUL : CTI_JIT_DIV, a, b, pos, 1));
  }
}

static int parse_expr(parser *P) {
  if (enter(P)) return -1;
  int a = parse_term(P);
  for (;;) {
    if (a < 0) return -1;
    skip_space(P);
    char c = P->s[P->i];
    if (c != '+' && c != '-') break;
    int pos = P->i++;
    int b = parse_term(P);
    if (b < 0) return -1;
    a = add_node(P, node(c == '+' ? CTI_JIT_ADD : CTI_JIT_SUB, a, b, pos, 1));
  }
  P->depth--;
  return a;
}

void cti_jit_ast_free(cti_jit_ast *ast) {
  if (!ast) return;
  free(ast->text);
  free(ast->nodes);
  memset(ast, 0, sizeof *ast);
}

int cti_jit_parse(const char *op, const char *expr, const char *inputs, const char *scalars, cti_jit_ast *ast) {
  memset(ast, 0, sizeof *ast);
  if (!expr) return ct_fail(CT_ERR_VALUE, "%s: NULL expression", op);
  size_t n = strnlen(expr, CT_JIT_MAX_EXPR + 1);
  if (n > CT_JIT_MAX_EXPR)
    return ct_fail(CT_ERR_VALUE, "%s: the expression is longer than %d bytes", op, CT_JIT_MAX_EXPR);
  if (!inputs) return ct_fail(CT_ERR_VALUE, "%s: NULL input list (name the inputs, as \"x,y\")", op);
  int rc = parse_names(op, "inputs", inputs, CT_JIT_MAX_INPUTS, ast->input, &ast->n_inputs);
  if (rc == CT_OK) rc = parse_names(op, "scalars", scalars, CT_JIT_MAX_SCALARS, ast->scalar, &ast->n_scalars);
  if (rc == CT_OK && ast->n_inputs == 0)
    rc = ct_fail(CT_ERR_VALUE, "%s: no inputs declared: name at least one (\"x\")", op);
  for (int i = 0; rc == CT_OK && i < ast->n_inputs + ast->n_scalars; ++i)
    for (int j = 0; rc == CT_OK && j < i; ++j) {
      const char *a = i < ast->n_inputs ? ast->input[i] : ast->scalar[i - ast->n_inputs];
      const char *b = j < ast->n_inputs ? ast->input[j] : ast->scalar[j - ast->n_inputs];
      if (!strcmp(a, b)) rc = ct_fail(CT_ERR_VALUE, "%s: the name \"%s\" is declared twice", op, a);
    }
  if (rc != CT_OK) {
    cti_jit_ast_free(ast);
    return rc;
  }
  ast->text = malloc(n + 1);
  if (!ast->text) return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  memcpy(ast->text, expr, n + 1);
  parser P = {.op = op, .s = ast->text, .i = 0, .depth = 0, .ast = ast};
  skip_space(&P);
  if (!P.s[P.i]) {
    rc = cti_jit_fail_at(CT_ERR_VALUE, P.s, P.i, 1, "%s: the expression is empty", op);
  } else {
    int root = parse_expr(&P);
    if (root >= 0) {
      skip_space(&P);
      if (P.s[P.i]) {
        char buf[48];
        const char *what = found_what(&P, P.i, buf, sizeof buf);
        rc = P.s[P.i] == ')' ? cti_jit_fail_at(CT_ERR_VALUE, P.s, P.i, 1, "%s: ')' without a matching '('", op)
                             : cti_jit_fail_at(CT_ERR_VALUE, P.s, P.i, token_len(&P, P.i),
                                               "%s: expected an operator (+ - * /) or the end, found %s", op, what);
      } else {
        ast->root = root;
      }
    } else {
      rc = ct_last_status();
    }
  }
  if (rc != CT_OK) cti_jit_ast_free(ast);
  return rc;
}
