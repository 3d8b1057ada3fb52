// SPDX-License-Identifier: MIT
//
// strbuf: the runtime's one growable string and its one JSON writer; the
// invariant and the JSON rules are in strbuf.h. Users: printing (print.c),
// the allocator's summary (alloc.c), Sequential's repr (nn.c), checkpoint
// headers (checkpoint.c) and the --metrics file (cli.c).
#include "strbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Enters with room for `extra` more bytes (and the NUL) or with oom set.
static bool sb_reserve(cti_strbuf *b, size_t extra) {
  if (b->oom) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  if (extra > ((size_t)-1) / 2 - b->len) { // the doubling below would overflow
    b->oom = true;
    return false;
  }
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->s, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->s = p;
  b->cap = cap;
  return true;
}

void cti_sb_putn(cti_strbuf *b, const void *p, size_t n) {
  if (!sb_reserve(b, n)) return;
  if (n) memcpy(b->s + b->len, p, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void cti_sb_puts(cti_strbuf *b, const char *s) { cti_sb_putn(b, s, strlen(s)); }

void cti_sb_printf(cti_strbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0 || !sb_reserve(b, (size_t)need)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)need;
}

void cti_sb_repeat(cti_strbuf *b, char c, int n) {
  if (n <= 0 || !sb_reserve(b, (size_t)n)) return;
  memset(b->s + b->len, c, (size_t)n);
  b->len += (size_t)n;
  b->s[b->len] = '\0';
}

char *cti_sb_take(cti_strbuf *b) {
  char *s = b->oom ? NULL : b->s ? b->s : calloc(1, 1);
  if (b->oom) free(b->s);
  *b = (cti_strbuf){0};
  return s;
}

void cti_sb_free(cti_strbuf *b) {
  free(b->s);
  *b = (cti_strbuf){0};
}

// ---- UTF-8 ----------------------------------------------------------------------------------
size_t cti_utf8_seq_len(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned cp, min;
  if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool cti_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = cti_utf8_seq_len(u + i, n - i);
    if (!k) return false;
    i += k;
  }
  return true;
}

// ---- JSON -----------------------------------------------------------------------------------
static void json_u00(cti_strbuf *b, unsigned char c) {
  char esc[8];
  snprintf(esc, sizeof esc, "\\u%04x", c);
  cti_sb_putn(b, esc, 6);
}

void cti_json_string(cti_strbuf *b, const char *s) {
  if (!s) {
    cti_sb_puts(b, "null");
    return;
  }
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  cti_sb_putn(b, "\"", 1);
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    const char *esc = NULL;
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    default: break;
    }
    if (esc) {
      cti_sb_putn(b, esc, 2);
      i++;
    } else if (c < 0x20) {
      json_u00(b, c);
      i++;
    } else {
      size_t k = cti_utf8_seq_len(p + i, n - i);
      if (k) {
        cti_sb_putn(b, p + i, k);
        i += k;
      } else { // not UTF-8: the Latin-1 character of that byte
        json_u00(b, c);
        i++;
      }
    }
  }
  cti_sb_putn(b, "\"", 1);
}

void cti_json_number(cti_strbuf *b, double v) {
  if (!isfinite(v)) {
    cti_sb_puts(b, "null");
    return;
  }
  char buf[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  cti_sb_puts(b, buf);
}
