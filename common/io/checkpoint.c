// SPDX-License-Identifier: MIT
//
// checkpoint: safetensors files, written atomically and read defensively.
//
// A safetensors file has three parts:
//   bytes [0, 8)        N, the length of the header, a little-endian uint64;
//   bytes [8, 8 + N)    the header: a JSON object, UTF-8, padded with spaces
//                       to a multiple of 8 bytes (so the data starts aligned):
//                       {"__metadata__":{"format":"pt"},
//                        "0.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[0,60]}, ...}
//   bytes [8 + N, end)  the data: each tensor's elements row-major and
//                       little-endian at [begin, end) of this part, the
//                       tensors back to back with no gap and no overlap.
// That is the whole format; PyTorch users read it with
// safetensors.torch.load_file and get a dict of tensors, a state_dict.
//
// Saving writes the header the way the reference implementation does (keys
// in the order given, "__metadata__" first, no whitespace, space padding),
// through the runtime's atomic writer (atomic_file.h): a temporary file
// beside the target, fflush + fsync, rename over the target, fsync of the
// directory, so a crash at any moment leaves either the old file or the new
// one, never half of one.
//
// Loading trusts nothing in the file. A small strict JSON parser reads
// exactly the header's shape (an object of tensor entries and an optional
// string map); every length, offset and count is checked against the file's
// size before anything is allocated, so a truncated, corrupt or hostile file
// fails with CT_ERR_IO and a message naming the file, the problem and what to
// do, never with a crash.
#define _POSIX_C_SOURCE 200809L // fileno, fseeko, O_CLOEXEC

#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "atomic_file.h"
#include "train_checkpoint.h"
#include "error.h"
#include "strbuf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes tensors' bytes as they are in memory: it needs a little-endian host"
#endif

// The reference implementation refuses headers above 100 MB; so do we.
#define ST_MAX_HEADER 100000000ull
#define ST_NAME_MAX ((int)sizeof(((ct_named_tensor *)0)->name) - 1) // 95 bytes

// ---- dtypes ---------------------------------------------------------------------------------
static const char *st_dtype_name(ct_dtype dt) {
  switch (dt) {
  case CT_F64: return "F64";
  case CT_F32: return "F32";
  case CT_F16: return "F16";
  case CT_BF16: return "BF16";
  case CT_I64: return "I64";
  case CT_I32: return "I32";
  case CT_U8: return "U8";
  case CT_BOOL: return "BOOL";
  default: return NULL;
  }
}

static bool st_dtype_parse(const char *s, ct_dtype *out) {
  for (int d = 0; d < CT_NUM_DTYPES; d++) {
    const char *name = st_dtype_name((ct_dtype)d);
    if (name && strcmp(name, s) == 0) {
      *out = (ct_dtype)d;
      return true;
    }
  }
  return false;
}

// ---- small helpers ----------------------------------------------------------------------------
// (The header is built in a cti_strbuf, its strings by cti_json_string, and
// names are checked with cti_utf8_valid: strbuf.h.)

// A copy of s fit to quote in a message: at most 60 bytes, control bytes as '?'.
static const char *printable(const char *s, char *out, size_t cap) {
  size_t i = 0;
  for (; s[i] && i + 1 < cap && i < 60; i++) out[i] = ((unsigned char)s[i] < 0x20) ? '?' : s[i];
  out[i] = '\0';
  if (s[i] && cap > 4 && i + 4 < cap) strcpy(out + i, "...");
  return out;
}

static void shape_text(int ndim, const int64_t *d, char *out, size_t cap) {
  size_t k = (size_t)snprintf(out, cap, "(");
  for (int i = 0; i < ndim && k < cap; i++)
    k += (size_t)snprintf(out + k, cap - k, i ? ", %" PRId64 : "%" PRId64, d[i]);
  if (k < cap) snprintf(out + k, cap - k, ndim == 1 ? ",)" : ")");
}

// numel * elsize of a shape with overflow checks; false if it does not fit in int64.
static bool shape_bytes(int ndim, const int64_t *d, size_t elsize, uint64_t *out) {
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++)
    if (d[i] == 0) {
      *out = 0;
      return true;
    }
  for (int i = 0; i < ndim; i++) {
    uint64_t v = (uint64_t)d[i];
    if (v != 0 && n > (uint64_t)INT64_MAX / v) return false;
    n *= v;
  }
  if (n > (uint64_t)INT64_MAX / elsize) return false;
  *out = n * elsize;
  return true;
}

// ================================================================================================
// Saving
// ================================================================================================
#define SAVE_OP "ct_save_safetensors"

// Checks the arguments and builds the padded header into h.
static int build_header(const char *path, const ct_named_tensor *entries, int n,
                        const char *const *metadata, cti_strbuf *h) {
  if (n < 0) return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: negative tensor count %d", path, n);
  if (n > 0 && !entries) return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: NULL entries for %d tensors", path, n);
  char pa[72], pb[72];
  int nmeta = 0;
  if (metadata) {
    for (; metadata[2 * nmeta]; nmeta++) {
      const char *k = metadata[2 * nmeta], *v = metadata[2 * nmeta + 1];
      if (!v)
        return ct_fail(CT_ERR_VALUE,
                       SAVE_OP ": %s: metadata key \"%s\" has no value (metadata is key, value, ..., NULL)",
                       path, printable(k, pa, sizeof pa));
      if (!cti_utf8_valid(k, strlen(k)) || !cti_utf8_valid(v, strlen(v)))
        return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: metadata \"%s\" is not valid UTF-8", path,
                       printable(k, pa, sizeof pa));
      for (int j = 0; j < nmeta; j++)
        if (strcmp(metadata[2 * j], k) == 0)
          return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: metadata key \"%s\" given twice", path,
                         printable(k, pa, sizeof pa));
    }
  }
  for (int i = 0; i < n; i++) {
    const char *name = entries[i].name;
    size_t len = strnlen(name, sizeof entries[i].name);
    if (len == 0 || len >= sizeof entries[i].name)
      return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: entry %d has %s name (names are 1 to %d bytes)", path, i,
                     len ? "an unterminated" : "an empty", ST_NAME_MAX);
    if (strcmp(name, "__metadata__") == 0)
      return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: \"__metadata__\" is reserved by the format; rename the tensor",
                     path);
    if (!cti_utf8_valid(name, len))
      return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: tensor name \"%s\" is not valid UTF-8", path,
                     printable(name, pa, sizeof pa));
    if (!entries[i].tensor)
      return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: tensor \"%s\" is NULL", path, printable(name, pa, sizeof pa));
    if (!st_dtype_name(ct_dtype_of(entries[i].tensor)))
      return ct_fail(CT_ERR_DTYPE, SAVE_OP ": %s: tensor \"%s\" has a dtype safetensors cannot hold", path,
                     printable(name, pa, sizeof pa));
    for (int j = 0; j < i; j++)
      if (strcmp(entries[j].name, name) == 0)
        return ct_fail(CT_ERR_VALUE, SAVE_OP ": %s: tensor name \"%s\" is used by entries %d and %d; names must be unique",
                       path, printable(name, pb, sizeof pb), j, i);
  }

  cti_sb_puts(h, "{");
  if (metadata) {
    cti_sb_puts(h, "\"__metadata__\":{");
    for (int j = 0; j < nmeta; j++) {
      if (j) cti_sb_puts(h, ",");
      cti_json_string(h, metadata[2 * j]);
      cti_sb_puts(h, ":");
      cti_json_string(h, metadata[2 * j + 1]);
    }
    cti_sb_puts(h, n ? "}," : "}");
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const ct_tensor *t = entries[i].tensor;
    ct_shape s = ct_shape_of(t);
    if (i) cti_sb_puts(h, ",");
    cti_json_string(h, entries[i].name);
    cti_sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(ct_dtype_of(t)));
    for (int d = 0; d < s.ndim; d++) cti_sb_printf(h, d ? ",%" PRId64 : "%" PRId64, s.d[d]);
    uint64_t nb = (uint64_t)ct_nbytes(t);
    cti_sb_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
    off += nb;
  }
  cti_sb_puts(h, "}");
  while (!h->oom && h->len % 8) cti_sb_puts(h, " ");
  if (h->oom) return ct_fail(CT_ERR_OOM, SAVE_OP ": %s: out of host memory building the header", path);
  return CT_OK;
}

// The data part: each tensor's bytes, row-major, in the order of the header.
// A tensor on another device, or a strided view, goes through a host copy.
static int write_data(cti_atomic_file *af, const ct_named_tensor *entries, int n) {
  void *stage = NULL;
  size_t stage_cap = 0;
  int rc = CT_OK;
  for (int i = 0; i < n && rc == CT_OK && !af->err; i++) { // after a failed write, commit reports it
    const ct_tensor *t = entries[i].tensor;
    size_t nb = ct_nbytes(t);
    if (nb == 0) continue;
    if (ct_device_of(t).type == CT_CPU && ct_is_contiguous(t)) {
      cti_atomic_write(af, ct_data_ptr(t), nb);
      continue;
    }
    if (nb > stage_cap) {
      free(stage);
      stage = malloc(nb);
      stage_cap = stage ? nb : 0;
      if (!stage) {
        rc = ct_fail(CT_ERR_OOM, SAVE_OP ": %s: out of host memory staging tensor \"%s\" (%zu bytes)", af->path,
                     entries[i].name, nb);
        break;
      }
    }
    if (ct_copy_to_host(t, stage, nb) != CT_OK) {
      char inner[512];
      snprintf(inner, sizeof inner, "%s", ct_last_error());
      rc = ct_fail(CT_ERR_IO, SAVE_OP ": %s: reading tensor \"%s\": %s", af->path, entries[i].name, inner);
      break;
    }
    cti_atomic_write(af, stage, nb);
  }
  free(stage);
  return rc;
}

int ct_save_safetensors(const char *path, const ct_named_tensor *entries, int n, const char *const *metadata) {
  if (!path || !*path) return ct_fail(CT_ERR_VALUE, SAVE_OP ": empty path");
  cti_strbuf h = {0};
  int rc = build_header(path, entries, n, metadata, &h);
  cti_atomic_file af;
  if (rc == CT_OK) rc = cti_atomic_open(&af, SAVE_OP, path);
  if (rc != CT_OK) {
    cti_sb_free(&h);
    return rc;
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
  cti_atomic_write(&af, len8, 8);
  cti_atomic_write(&af, h.s, h.len);
  cti_sb_free(&h);
  rc = write_data(&af, entries, n);
  if (rc != CT_OK) {
    cti_atomic_abort(&af);
    return rc;
  }
  return cti_atomic_commit(&af);
}

// ================================================================================================
// Loading
// ================================================================================================
#define LOAD_OP "ct_load_safetensors"

// One tensor entry of the header, as parsed.
typedef struct st_entry {
  char name[96];
  char dtype_str[16];
  bool has_dtype, has_shape, has_offsets;
  int ndim;
  int64_t d[CT_MAX_DIMS];
  uint64_t begin, end;
} st_entry;

// The parser's state: the header bytes, a cursor, and where to report.
typedef struct st_json {
  const char *s;
  size_t n, i;
  const char *path;
  char **meta; // when not NULL... see js_metadata: key, value, ..., NULL
  int nmeta;
  bool want_meta;
} st_json;

static int load_fail(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int load_fail(const char *path, const char *fmt, ...) {
  char detail[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return ct_fail(CT_ERR_IO, LOAD_OP ": %s: %s", path, detail);
}

// A JSON syntax error: where, and what was expected.
static int js_fail(st_json *j, const char *expected) {
  char got[16];
  if (j->i >= j->n) snprintf(got, sizeof got, "the end");
  else if ((unsigned char)j->s[j->i] >= 0x20 && (unsigned char)j->s[j->i] < 0x7F) snprintf(got, sizeof got, "'%c'", j->s[j->i]);
  else snprintf(got, sizeof got, "byte 0x%02x", (unsigned char)j->s[j->i]);
  return load_fail(j->path,
                   "bad JSON header at byte %zu of %zu: expected %s, found %s (the file is corrupt or not "
                   "safetensors; re-save it with ct_save_safetensors or safetensors.torch.save_file)",
                   j->i, j->n, expected, got);
}

static void js_ws(st_json *j) {
  while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static bool js_eat(st_json *j, char c) {
  js_ws(j);
  if (j->i < j->n && j->s[j->i] == c) {
    j->i++;
    return true;
  }
  return false;
}

static int hex4(st_json *j, unsigned *out) {
  if (j->n - j->i < 4) return -1;
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    char c = j->s[j->i + k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  j->i += 4;
  *out = v;
  return 0;
}

// Parses a JSON string into out (cap bytes with the NUL; NULL to only check
// it). *len gets the decoded length, which may exceed cap - 1 (then out holds
// a prefix). *has_nul is set when the string contains U+0000.
static int js_string(st_json *j, char *out, size_t cap, size_t *len, bool *has_nul) {
  js_ws(j);
  if (j->i >= j->n || j->s[j->i] != '"') return js_fail(j, "a string");
  j->i++;
  size_t k = 0;
  if (has_nul) *has_nul = false;
  for (;;) {
    if (j->i >= j->n) return js_fail(j, "the closing '\"' of a string");
    unsigned char c = (unsigned char)j->s[j->i];
    char enc[4];
    size_t m = 0;
    if (c == '"') {
      j->i++;
      break;
    } else if (c < 0x20) {
      return js_fail(j, "a string character (control bytes must be escaped)");
    } else if (c == '\\') {
      j->i++;
      if (j->i >= j->n) return js_fail(j, "an escape");
      char e = j->s[j->i++];
      unsigned cp;
      switch (e) {
      case '"': enc[m++] = '"'; break;
      case '\\': enc[m++] = '\\'; break;
      case '/': enc[m++] = '/'; break;
      case 'b': enc[m++] = '\b'; break;
      case 'f': enc[m++] = '\f'; break;
      case 'n': enc[m++] = '\n'; break;
      case 'r': enc[m++] = '\r'; break;
      case 't': enc[m++] = '\t'; break;
      case 'u':
        if (hex4(j, &cp)) return js_fail(j, "4 hex digits after \\u");
        if (cp >= 0xDC00 && cp <= 0xDFFF) return js_fail(j, "a high surrogate before a low one");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned lo;
          if (j->n - j->i < 2 || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u') return js_fail(j, "a low surrogate \\uDC00-\\uDFFF");
          j->i += 2;
          if (hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF) return js_fail(j, "a low surrogate \\uDC00-\\uDFFF");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0 && has_nul) *has_nul = true;
        if (cp < 0x80) enc[m++] = (char)cp;
        else if (cp < 0x800) {
          enc[m++] = (char)(0xC0 | (cp >> 6));
          enc[m++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
          enc[m++] = (char)(0xE0 | (cp >> 12));
          enc[m++] = (char)(0x80 | ((cp >> 6) & 0x3F));
          enc[m++] = (char)(0x80 | (cp & 0x3F));
        } else {
          enc[m++] = (char)(0xF0 | (cp >> 18));
          enc[m++] = (char)(0x80 | ((cp >> 12) & 0x3F));
          enc[m++] = (char)(0x80 | ((cp >> 6) & 0x3F));
          enc[m++] = (char)(0x80 | (cp & 0x3F));
        }
        break;
      default: j->i--; return js_fail(j, "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    } else { // raw UTF-8 (validated for the whole header before parsing)
      size_t q = cti_utf8_seq_len((const unsigned char *)j->s + j->i, j->n - j->i);
      if (!q) return js_fail(j, "valid UTF-8");
      memcpy(enc, j->s + j->i, q);
      m = q;
      j->i += q;
    }
    for (size_t q = 0; q < m; q++, k++)
      if (out && k + 1 < cap) out[k] = enc[q];
  }
  if (out && cap) out[k < cap ? k : cap - 1] = '\0';
  if (len) *len = k;
  return CT_OK;
}

// A non-negative integer without sign, fraction, exponent or leading zeros.
static int js_uint(st_json *j, uint64_t *out) {
  js_ws(j);
  if (j->i >= j->n || j->s[j->i] < '0' || j->s[j->i] > '9') return js_fail(j, "a non-negative integer");
  uint64_t v = 0;
  size_t start = j->i;
  while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
    unsigned dgt = (unsigned)(j->s[j->i] - '0');
    if (v > ((uint64_t)INT64_MAX - dgt) / 10) return js_fail(j, "an integer below 2^63");
    v = v * 10 + dgt;
    j->i++;
  }
  if (j->s[start] == '0' && j->i - start > 1) {
    j->i = start;
    return js_fail(j, "an integer without leading zeros");
  }
  if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
    return js_fail(j, "an integer (no fraction or exponent)");
  *out = v;
  return CT_OK;
}

// [u, u, ...] with at most `max` items; ST_TOO_MANY (no error recorded)
// when there are more.
#define ST_TOO_MANY (-2)
static int js_uint_array(st_json *j, uint64_t *v, int max, int *count) {
  if (!js_eat(j, '[')) return js_fail(j, "'[' opening an array");
  int c = 0;
  if (!js_eat(j, ']')) {
    for (;;) {
      uint64_t x = 0;
      if (c == max) return ST_TOO_MANY;
      int rc = js_uint(j, &x);
      if (rc) return rc;
      v[c++] = x;
      if (js_eat(j, ']')) break;
      if (!js_eat(j, ',')) return js_fail(j, "',' or ']'");
    }
  }
  *count = c;
  return CT_OK;
}

// {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, fields in any order.
static int js_entry(st_json *j, st_entry *e) {
  char pe[72];
  if (!js_eat(j, '{')) return js_fail(j, "'{' opening a tensor entry");
  if (js_eat(j, '}')) goto check;
  for (;;) {
    char key[24];
    size_t klen;
    int rc = js_string(j, key, sizeof key, &klen, NULL);
    if (rc) return rc;
    if (!js_eat(j, ':')) return js_fail(j, "':'");
    if (klen == 5 && strcmp(key, "dtype") == 0) {
      if (e->has_dtype) return load_fail(j->path, "tensor \"%s\": \"dtype\" given twice", printable(e->name, pe, sizeof pe));
      size_t dl;
      if ((rc = js_string(j, e->dtype_str, sizeof e->dtype_str, &dl, NULL))) return rc;
      if (dl >= sizeof e->dtype_str) strcpy(e->dtype_str + sizeof e->dtype_str - 4, "...");
      e->has_dtype = true;
    } else if (klen == 5 && strcmp(key, "shape") == 0) {
      if (e->has_shape) return load_fail(j->path, "tensor \"%s\": \"shape\" given twice", printable(e->name, pe, sizeof pe));
      uint64_t d[CT_MAX_DIMS];
      rc = js_uint_array(j, d, CT_MAX_DIMS, &e->ndim);
      if (rc == ST_TOO_MANY)
        return load_fail(j->path, "tensor \"%s\" has more than %d dimensions, which ct does not support "
                         "(reshape it to at most %d before saving)", printable(e->name, pe, sizeof pe), CT_MAX_DIMS, CT_MAX_DIMS);
      if (rc) return rc;
      for (int q = 0; q < e->ndim; q++) e->d[q] = (int64_t)d[q];
      e->has_shape = true;
    } else if (klen == 12 && strcmp(key, "data_offsets") == 0) {
      if (e->has_offsets)
        return load_fail(j->path, "tensor \"%s\": \"data_offsets\" given twice", printable(e->name, pe, sizeof pe));
      uint64_t o[2];
      int c;
      rc = js_uint_array(j, o, 2, &c);
      if (rc && rc != ST_TOO_MANY) return rc;
      if (rc == ST_TOO_MANY || c != 2)
        return load_fail(j->path, "tensor \"%s\" has %s data_offsets; they must be [begin, end] (the header is corrupt)",
                         printable(e->name, pe, sizeof pe), rc ? "more than 2" : c ? "1" : "no");
      e->begin = o[0];
      e->end = o[1];
      e->has_offsets = true;
    } else {
      char pk[72];
      return load_fail(j->path, "tensor \"%s\" has an unknown field \"%s\" (expected dtype, shape, data_offsets)",
                       printable(e->name, pe, sizeof pe), printable(key, pk, sizeof pk));
    }
    if (js_eat(j, '}')) break;
    if (!js_eat(j, ',')) return js_fail(j, "',' or '}'");
  }
check:
  if (!e->has_dtype || !e->has_shape || !e->has_offsets)
    return load_fail(j->path, "tensor \"%s\" lacks its \"%s\" field", printable(e->name, pe, sizeof pe),
                     !e->has_dtype ? "dtype" : !e->has_shape ? "shape" : "data_offsets");
  return CT_OK;
}

// Decodes the string starting at byte `at` (already parsed once) into a new
// entry of j->meta, which stays NULL-terminated. A string holding NUL is
// refused: C strings could not carry it.
static int js_keep(st_json *j, size_t at) {
  size_t end = j->i, len = 0;
  bool nul = false;
  j->i = at;
  js_string(j, NULL, 0, &len, &nul);
  if (nul) return load_fail(j->path, "a __metadata__ string holds a NUL character");
  char *str = malloc(len + 1);
  char **grown = realloc(j->meta, (size_t)(j->nmeta + 2) * sizeof *grown);
  if (grown) j->meta = grown;
  if (!str || !grown) {
    free(str);
    return ct_fail(CT_ERR_OOM, LOAD_OP ": %s: out of host memory for the metadata", j->path);
  }
  j->i = at;
  js_string(j, str, len + 1, NULL, NULL);
  j->i = end;
  j->meta[j->nmeta++] = str;
  j->meta[j->nmeta] = NULL;
  return CT_OK;
}

void ct_metadata_free(char **metadata) {
  if (!metadata) return;
  for (char **p = metadata; *p; ++p) free(*p);
  free(metadata);
}

const char *ct_metadata_get(char *const *metadata, const char *key) {
  for (char *const *p = metadata; p && p[0] && p[1]; p += 2)
    if (strcmp(p[0], key) == 0) return p[1];
  return NULL;
}

// {"key": "value", ...} or null.
static int js_metadata(st_json *j) {
  js_ws(j);
  if (j->n - j->i >= 4 && memcmp(j->s + j->i, "null", 4) == 0) {
    j->i += 4;
    return CT_OK;
  }
  if (!js_eat(j, '{')) return js_fail(j, "'{' opening __metadata__");
  if (js_eat(j, '}')) return CT_OK;
  for (;;) {
    size_t at = j->i;
    int rc = js_string(j, NULL, 0, NULL, NULL);
    if (rc) return rc;
    if (j->want_meta && (rc = js_keep(j, at))) return rc;
    if (!js_eat(j, ':')) return js_fail(j, "':'");
    js_ws(j);
    if (j->i >= j->n || j->s[j->i] != '"') return js_fail(j, "a string value (__metadata__ maps strings to strings)");
    at = j->i;
    if ((rc = js_string(j, NULL, 0, NULL, NULL))) return rc;
    if (j->want_meta && (rc = js_keep(j, at))) return rc;
    if (js_eat(j, '}')) return CT_OK;
    if (!js_eat(j, ',')) return js_fail(j, "',' or '}'");
  }
}

// The whole header: fills *out with *count entries in header order.
static int js_header(st_json *j, st_entry **out, int *count) {
  st_entry *es = NULL;
  int n = 0, cap = 0, rc = CT_OK;
  bool seen_meta = false;
  char pn[72];
  if (!js_eat(j, '{')) return js_fail(j, "'{' opening the header");
  if (!js_eat(j, '}')) {
    for (;;) {
      char name[96];
      size_t len;
      bool nul;
      if ((rc = js_string(j, name, sizeof name, &len, &nul))) goto bad;
      if (!js_eat(j, ':')) {
        rc = js_fail(j, "':'");
        goto bad;
      }
      if (strcmp(name, "__metadata__") == 0 && len == 12) {
        if (seen_meta) {
          rc = load_fail(j->path, "\"__metadata__\" appears twice in the header");
          goto bad;
        }
        seen_meta = true;
        if ((rc = js_metadata(j))) goto bad;
      } else {
        if (len == 0 || len > (size_t)ST_NAME_MAX || nul) {
          rc = load_fail(j->path, "tensor name \"%s\"%s is %s (ct keeps names of 1 to %d bytes)",
                         printable(name, pn, sizeof pn), len > (size_t)ST_NAME_MAX ? "..." : "",
                         nul ? "holds a NUL character, which" : len ? "too long" : "empty", ST_NAME_MAX);
          goto bad;
        }
        for (int q = 0; q < n; q++)
          if (strcmp(es[q].name, name) == 0) {
            rc = load_fail(j->path, "tensor \"%s\" appears twice in the header", printable(name, pn, sizeof pn));
            goto bad;
          }
        if (n == cap) {
          int nc = cap ? cap * 2 : 16;
          st_entry *ne = realloc(es, (size_t)nc * sizeof *ne);
          if (!ne) {
            rc = ct_fail(CT_ERR_OOM, LOAD_OP ": %s: out of host memory", j->path);
            goto bad;
          }
          es = ne;
          cap = nc;
        }
        memset(&es[n], 0, sizeof es[n]);
        memcpy(es[n].name, name, len + 1);
        if ((rc = js_entry(j, &es[n]))) goto bad;
        n++;
      }
      if (js_eat(j, '}')) break;
      if (!js_eat(j, ',')) {
        rc = js_fail(j, "',' or '}'");
        goto bad;
      }
    }
  }
  js_ws(j); // the padding
  if (j->i != j->n) {
    rc = js_fail(j, "only spaces after the header's closing '}'");
    goto bad;
  }
  *out = es;
  *count = n;
  return CT_OK;
bad:
  free(es);
  return rc;
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

// dtypes, sizes and offsets against each other and the data part's length.
static int check_entries(const char *path, st_entry *es, int n, uint64_t data_len) {
  char pn[72], pm[72], sh[160];
  for (int i = 0; i < n; i++) {
    st_entry *e = &es[i];
    ct_dtype dt;
    if (!st_dtype_parse(e->dtype_str, &dt))
      return load_fail(path,
                       "tensor \"%s\" has dtype \"%s\", which ct does not support (ct reads F64, F32, F16, "
                       "BF16, I64, I32, U8 and BOOL; convert it in PyTorch, e.g. t.float(), and save again)",
                       printable(e->name, pn, sizeof pn), printable(e->dtype_str, pm, sizeof pm));
    uint64_t nb;
    shape_text(e->ndim, e->d, sh, sizeof sh);
    if (!shape_bytes(e->ndim, e->d, ct_dtype_size(dt), &nb))
      return load_fail(path, "tensor \"%s\" has shape %s, too large to exist (the header is corrupt)",
                       printable(e->name, pn, sizeof pn), sh);
    if (e->end < e->begin)
      return load_fail(path, "tensor \"%s\" has data_offsets [%" PRIu64 ", %" PRIu64 "] that end before they begin (the header is corrupt)",
                       printable(e->name, pn, sizeof pn), e->begin, e->end);
    if (e->end - e->begin != nb)
      return load_fail(path,
                       "tensor \"%s\" (%s, shape %s) needs %" PRIu64 " bytes, but its data_offsets [%" PRIu64
                       ", %" PRIu64 "] hold %" PRIu64 " (the header is corrupt)",
                       printable(e->name, pn, sizeof pn), e->dtype_str, sh, nb, e->begin, e->end, e->end - e->begin);
    if (e->end > data_len)
      return load_fail(path,
                       "tensor \"%s\" has data_offsets [%" PRIu64 ", %" PRIu64 "] past the end of the data (%" PRIu64
                       " bytes): the file is truncated; save it again",
                       printable(e->name, pn, sizeof pn), e->begin, e->end, data_len);
  }
  // Back to back from 0 to the end of the file: no gap, no overlap, nothing after.
  st_entry **by = malloc((size_t)(n ? n : 1) * sizeof *by);
  if (!by) return ct_fail(CT_ERR_OOM, LOAD_OP ": %s: out of host memory", path);
  for (int i = 0; i < n; i++) by[i] = &es[i];
  qsort(by, (size_t)n, sizeof *by, cmp_begin);
  uint64_t at = 0;
  int rc = CT_OK;
  for (int i = 0; i < n && rc == CT_OK; i++) {
    if (by[i]->begin < at)
      rc = load_fail(path, "tensors \"%s\" and \"%s\" overlap (data_offsets [%" PRIu64 ", %" PRIu64 "] and [%" PRIu64
                     ", %" PRIu64 "]): the header is corrupt",
                     printable(by[i - 1]->name, pn, sizeof pn), printable(by[i]->name, pm, sizeof pm),
                     by[i - 1]->begin, by[i - 1]->end, by[i]->begin, by[i]->end);
    else if (by[i]->begin > at)
      rc = load_fail(path, "a gap of %" PRIu64 " bytes before tensor \"%s\" (data_offsets must be contiguous): the header is corrupt",
                     by[i]->begin - at, printable(by[i]->name, pn, sizeof pn));
    at = by[i]->end;
  }
  free(by);
  if (rc == CT_OK && at != data_len)
    rc = load_fail(path, "the tensors cover %" PRIu64 " bytes of data but the file holds %" PRIu64
                   " after the header (%s): the file is corrupt",
                   at, data_len, at < data_len ? "trailing bytes" : "truncated");
  return rc;
}

int ct_load_safetensors(const char *path, ct_device device, ct_named_tensor **entries, int *n) {
  return ct_load_safetensors_with_metadata(path, device, entries, n, NULL);
}

int ct_load_safetensors_with_metadata(const char *path, ct_device device, ct_named_tensor **entries, int *n,
                                 char ***metadata) {
  if (entries) *entries = NULL;
  if (n) *n = 0;
  if (metadata) *metadata = NULL;
  if (!path || !entries || !n) return ct_fail(CT_ERR_VALUE, LOAD_OP ": NULL argument");
  errno = 0;
  FILE *f = ct_open_input(LOAD_OP, path, "give the path of a safetensors file");
  if (!f && errno && errno != EISDIR)
    return ct_fail(CT_ERR_IO, LOAD_OP ": %s: cannot open: %s (give the path of a safetensors file)", path,
                   strerror(errno));
  if (!f) return CT_ERR_IO;
  char *hdr = NULL;
  st_entry *es = NULL;
  ct_named_tensor *out = NULL;
  st_json j = {0};
  int count = 0, done = 0, rc;
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0) {
    rc = load_fail(path, "cannot stat: %s", strerror(errno));
    goto out;
  }
  if (!S_ISREG(sb.st_mode)) {
    rc = load_fail(path, "%s, not a file: give the path of a safetensors file",
                   S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    goto out;
  }
  uint64_t size = (uint64_t)sb.st_size;
  unsigned char len8[8];
  if (size < 8 || fread(len8, 1, 8, f) != 8) {
    rc = load_fail(path, "the file is %" PRIu64 " bytes, too short for a safetensors file (8-byte header length, "
                   "header, data); is it a checkpoint, and was it completely written?", size);
    goto out;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
  if (hlen > ST_MAX_HEADER) {
    rc = load_fail(path, "header length %" PRIu64 " is above the format's limit of %llu bytes: not a safetensors "
                   "file (a PyTorch .pt/.pth file is a zip; load it in Python and save it with safetensors)",
                   hlen, ST_MAX_HEADER);
    goto out;
  }
  if (hlen > size - 8) {
    rc = load_fail(path, "header length %" PRIu64 " runs past the end of the file (%" PRIu64
                   " bytes): the file is truncated or not safetensors; save it again", hlen, size);
    goto out;
  }
  hdr = malloc(hlen + 1);
  if (!hdr) {
    rc = ct_fail(CT_ERR_OOM, LOAD_OP ": %s: out of host memory for a %" PRIu64 "-byte header", path, hlen);
    goto out;
  }
  if (fread(hdr, 1, hlen, f) != hlen) {
    rc = load_fail(path, "reading the header: %s", ferror(f) ? strerror(errno) : "unexpected end of file");
    goto out;
  }
  hdr[hlen] = '\0';
  if (!cti_utf8_valid(hdr, hlen)) {
    rc = load_fail(path, "the header is not valid UTF-8: the file is corrupt or not safetensors");
    goto out;
  }
  j = (st_json){hdr, hlen, 0, path, NULL, 0, metadata != NULL};
  if ((rc = js_header(&j, &es, &count))) goto out;
  uint64_t data_start = 8 + hlen, data_len = size - data_start;
  if ((rc = check_entries(path, es, count, data_len))) goto out;

  out = calloc((size_t)(count ? count : 1), sizeof *out);
  if (!out) {
    rc = ct_fail(CT_ERR_OOM, LOAD_OP ": %s: out of host memory", path);
    goto out;
  }
  for (; done < count; done++) {
    st_entry *e = &es[done];
    ct_dtype dt = CT_F32;
    st_dtype_parse(e->dtype_str, &dt); // checked by check_entries
    ct_shape s = {e->ndim, {0}};
    for (int q = 0; q < e->ndim; q++) s.d[q] = e->d[q];
    ct_tensor *t = ct_empty(s, dt, ct_device_cpu());
    char pn[72];
    if (!t) goto tensor_error;
    uint64_t nb = e->end - e->begin;
    if (nb) {
      if (fseeko(f, (off_t)(data_start + e->begin), SEEK_SET) != 0 || fread(ct_data_ptr(t), 1, nb, f) != nb) {
        ct_free(t);
        rc = load_fail(path, "reading tensor \"%s\": %s", printable(e->name, pn, sizeof pn),
                       ferror(f) ? strerror(errno) : "unexpected end of file (did the file change while it was read?)");
        goto out;
      }
    }
    if (dt == CT_BOOL) {
      const unsigned char *b = ct_data_ptr(t);
      for (uint64_t q = 0; q < nb; q++)
        if (b[q] > 1) {
          ct_free(t);
          rc = load_fail(path, "BOOL tensor \"%s\" holds byte %u at element %" PRIu64 " (BOOL bytes are 0 or 1): the file is corrupt",
                         printable(e->name, pn, sizeof pn), b[q], q);
          goto out;
        }
    }
    if (device.type != CT_CPU) {
      ct_tensor *m = ct_to_device(t, device);
      ct_free(t);
      t = m;
      if (!t) goto tensor_error;
    }
    memcpy(out[done].name, e->name, sizeof out[done].name);
    out[done].tensor = t;
    continue;
  tensor_error: {
    char inner[600];
    snprintf(inner, sizeof inner, "%s", ct_last_error());
    ct_status st = ct_last_status() != CT_OK ? ct_last_status() : CT_ERR_IO;
    rc = ct_fail(st, LOAD_OP ": %s: tensor \"%s\": %s", path, printable(e->name, pn, sizeof pn), inner);
    goto out;
  }
  }
  rc = CT_OK;
  if (metadata && !j.meta && !(j.meta = calloc(1, sizeof *j.meta))) // none: an empty list, not NULL
    rc = ct_fail(CT_ERR_OOM, LOAD_OP ": %s: out of host memory", path);
out:
  if (rc == CT_OK) {
    *entries = out;
    *n = count;
    if (metadata) *metadata = j.meta, j.meta = NULL;
  } else {
    ct_named_tensors_free(out, done);
  }
  ct_metadata_free(j.meta);
  free(es);
  free(hdr);
  fclose(f);
  return rc;
}

// ================================================================================================
// Modules
// ================================================================================================
int cti_keep_prefixed(ct_named_tensor *es, int n, const char *prefix) {
  const size_t pl = strlen(prefix);
  int kept = 0;
  for (int i = 0; i < n; i++) {
    if (strncmp(es[i].name, prefix, pl) != 0) {
      ct_free(es[i].tensor);
      continue;
    }
    ct_named_tensor e = es[i];
    memmove(e.name, e.name + pl, strlen(e.name + pl) + 1);
    es[kept++] = e;
  }
  return kept;
}

bool cti_is_train_checkpoint(char *const *metadata) {
  const char *f = ct_metadata_get(metadata, "ct.format");
  return f && strcmp(f, CTI_TRAIN_FORMAT) == 0;
}
int ct_module_save(ct_module *m, const char *path) {
  if (!m) return ct_fail(CT_ERR_VALUE, "ct_module_save: NULL module");
  int n = 0;
  ct_param **st = ct_module_state(m, &n);
  if (n < 0 || (n > 0 && !st)) return ct_last_status() != CT_OK ? ct_last_status() : ct_fail(CT_ERR_VALUE, "ct_module_save: no state");
  ct_named_tensor *arr = calloc((size_t)(n ? n : 1), sizeof *arr);
  if (!arr) return ct_fail(CT_ERR_OOM, "ct_module_save: %s: out of host memory", path ? path : "(null)");
  for (int i = 0; i < n; i++) {
    snprintf(arr[i].name, sizeof arr[i].name, "%s", st[i]->name);
    arr[i].tensor = st[i]->value;
  }
  // What Hugging Face's save_pretrained writes: readers may check it.
  static const char *const meta[] = {"format", "pt", NULL};
  int rc = ct_save_safetensors(path, arr, n, meta);
  free(arr);
  return rc;
}

// Appends `"a", "b", ...` (at most the first 8) to a message.
static void list_keys(cti_strbuf *b, const char *const *names, int n) {
  for (int i = 0; i < n && i < 8; i++) {
    if (i) cti_sb_puts(b, ", ");
    cti_json_string(b, names[i]);
  }
  if (n > 8) cti_sb_printf(b, " and %d more", n - 8);
}

// The prefix p (at most cap - 1 bytes) with which every key of `longer`
// is p + a key of `shorter`, the two lists being the same size; false if
// there is none.
static bool common_prefix(const char *const *longer, const char *const *shorter, int n, char *p, size_t cap) {
  if (n == 0) return false;
  size_t ls = strlen(shorter[0]);
  int k = -1; // the key of `longer` ending with shorter[0]
  for (int i = 0; i < n && k < 0; i++) {
    size_t l = strlen(longer[i]);
    if (l > ls && l - ls < cap && strcmp(longer[i] + l - ls, shorter[0]) == 0) k = i;
  }
  if (k < 0) return false;
  size_t pl = strlen(longer[k]) - ls;
  memcpy(p, longer[k], pl);
  p[pl] = '\0';
  for (int j = 0; j < n; j++) {
    bool found = false;
    for (int i = 0; i < n && !found; i++)
      found = strncmp(longer[i], p, pl) == 0 && strcmp(longer[i] + pl, shorter[j]) == 0;
    if (!found) return false;
  }
  return true;
}

// What to do about a state_dict that does not fit: a wrapper's "module."
// prefix one side has and the other lacks, another model, or other sizes.
static void load_hint(const char *const *missing, int nmiss, const char *const *unexpected, int nunex, char *hint,
                      size_t cap) {
  char p[64];
  if (nmiss == nunex && common_prefix(unexpected, missing, nmiss, p, sizeof p))
    snprintf(hint, cap, "the file's keys carry the prefix \"%s\" that the model's lack, as nn.DataParallel's and "
             "DistributedDataParallel's state_dict() add \"module.\": strip it with "
             "ct_consume_prefix_in_state_dict_if_present(entries, n, \"%s\") before ct_module_load_state, or save "
             "model.module's state_dict", p, p);
  else if (nmiss == nunex && common_prefix(missing, unexpected, nmiss, p, sizeof p))
    snprintf(hint, cap, "the model's keys carry the prefix \"%s\" that the file's lack: load the file into the "
             "wrapped module (model.module), or save the wrapper's own state_dict", p);
  else if (nunex)
    snprintf(hint, cap, "the file holds another model's state_dict; build the same layers in the same order");
  else if (nmiss)
    snprintf(hint, cap, "the file lacks tensors this model has: it is incomplete or from another model; save it "
             "again from the same model");
  else
    snprintf(hint, cap, "the file was saved from a model of another size");
}

int ct_module_load(ct_module *m, const char *path) {
  if (!m || !path) return ct_fail(CT_ERR_VALUE, "ct_module_load: NULL argument");
  int ns = 0, n = 0;
  ct_param **st = ct_module_state(m, &ns);
  if (ns < 0 || (ns > 0 && !st)) return ct_last_status() != CT_OK ? ct_last_status() : ct_fail(CT_ERR_VALUE, "ct_module_load: no state");
  ct_named_tensor *es = NULL;
  char **meta = NULL;
  int rc = ct_load_safetensors_with_metadata(path, ct_module_device(m), &es, &n, &meta);
  if (rc != CT_OK) return rc;
  if (cti_is_train_checkpoint(meta)) n = cti_keep_prefixed(es, n, CTI_TRAIN_MODEL_PREFIX); // its model part
  ct_metadata_free(meta);

  // Check everything before changing anything, so a failed load leaves the
  // model as it was (torch copies the matching tensors, then raises). Like
  // torch, one message lists every missing and unexpected key and the first
  // size mismatch; its advice says which case it is.
  const char **missing = calloc((size_t)ns + 1, sizeof *missing);
  const char **unexpected = calloc((size_t)n + 1, sizeof *unexpected);
  int nmiss = 0, nunex = 0;
  cti_strbuf msg = {0};
  char size_msg[512] = "";
  if (!missing || !unexpected) {
    rc = ct_fail(CT_ERR_OOM, "ct_module_load: %s: out of host memory", path);
    goto out;
  }
  for (int i = 0; i < ns; i++) {
    int k = -1;
    for (int q = 0; q < n && k < 0; q++)
      if (strcmp(es[q].name, st[i]->name) == 0) k = q;
    if (k < 0) {
      missing[nmiss++] = st[i]->name;
      continue;
    }
    ct_shape want = ct_shape_of(st[i]->value), got = ct_shape_of(es[k].tensor);
    if (!ct_shape_eq(want, got) && !size_msg[0]) {
      char a[160], b[160];
      shape_text(got.ndim, got.d, a, sizeof a);
      shape_text(want.ndim, want.d, b, sizeof b);
      snprintf(size_msg, sizeof size_msg, "size mismatch for %s: copying a param with shape %s from checkpoint, "
               "the shape in current model is %s", st[i]->name, a, b);
    }
  }
  for (int q = 0; q < n; q++) {
    bool found = false;
    for (int i = 0; i < ns && !found; i++) found = strcmp(es[q].name, st[i]->name) == 0;
    if (!found) unexpected[nunex++] = es[q].name;
  }
  if (nmiss || nunex || size_msg[0]) {
    if (nmiss || nunex) cti_sb_puts(&msg, "Error(s) in loading state_dict:");
    if (nmiss) {
      cti_sb_puts(&msg, " Missing key(s) in state_dict: ");
      list_keys(&msg, missing, nmiss);
      cti_sb_puts(&msg, ".");
    }
    if (nunex) {
      cti_sb_puts(&msg, " Unexpected key(s) in state_dict: ");
      list_keys(&msg, unexpected, nunex);
      cti_sb_puts(&msg, ".");
    }
    if (size_msg[0]) cti_sb_printf(&msg, "%s%s", nmiss || nunex ? " " : "", size_msg);
    char hint[400];
    load_hint(missing, nmiss, unexpected, nunex, hint, sizeof hint);
    rc = ct_fail(CT_ERR_VALUE, "ct_module_load: %s: %s (%s)", path,
                 msg.oom || !msg.s ? "Missing or unexpected keys" : msg.s, hint);
    goto out;
  }
  rc = ct_module_load_state(m, es, n, true);
  if (rc != CT_OK) {
    char inner[700];
    snprintf(inner, sizeof inner, "%s", ct_last_error());
    rc = ct_fail((ct_status)rc, "ct_module_load: %s: %s", path, inner);
  }
out:
  cti_sb_free(&msg);
  free(missing);
  free(unexpected);
  ct_named_tensors_free(es, n);
  return rc;
}
