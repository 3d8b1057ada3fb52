// SPDX-License-Identifier: MIT
//
// strbuf: a growable string, and JSON values written into one (internal).
//
// Invariant: a cti_strbuf is either empty ({0}: s == NULL, len == 0) or s
// holds len bytes followed by a NUL. Once a growth fails, `oom` stays true
// and every later append is dropped, so a writer appends freely and checks
// `oom` once at the end (cti_sb_take does it for it).
//
// The JSON writer is two functions, because the runtime writes JSON in two
// layouts (a checkpoint header with no whitespace, a metrics file one key a
// line) and both are a handful of puts around strings and numbers:
//   cti_json_string   a string literal by RFC 8259 section 7, as Python's
//                     json.dumps(s, ensure_ascii=False) and serde_json write
//                     it: " and \ escaped, \b \f \n \r \t in their short
//                     forms, the other bytes below 0x20 as \u00xx (lowercase
//                     hex), everything else, valid UTF-8 included, as is. A
//                     byte that is not part of valid UTF-8 (the input is a C
//                     string, not a Python str) becomes \u00xx, the Latin-1
//                     character of that value, so the output always parses;
//   cti_json_number   the shortest "%.{15,16,17}g" that reads back as the same
//                     double; null for NaN and the infinities, which JSON
//                     cannot spell.
#ifndef CT_STRBUF_H
#define CT_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cti_strbuf {
  char *s;    // NULL until the first append
  size_t len; // bytes before the NUL
  size_t cap; // bytes allocated at s
  bool oom;   // a growth failed; later appends are dropped
} cti_strbuf;

void cti_sb_putn(cti_strbuf *b, const void *p, size_t n);
void cti_sb_puts(cti_strbuf *b, const char *s);
void cti_sb_printf(cti_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cti_sb_repeat(cti_strbuf *b, char c, int n); // n <= 0 appends nothing

// Enters with any buffer; leaves it empty ({0}) and returns its string (""
// when nothing was appended), or NULL when an append ran out of memory or
// the empty string cannot be allocated. The caller frees the result.
char *cti_sb_take(cti_strbuf *b);
void cti_sb_free(cti_strbuf *b); // leaves b empty

// Bytes of the valid UTF-8 sequence at s[0..n) (1..4), 0 if it is not one:
// overlong forms, surrogates (U+D800..U+DFFF) and code points above U+10FFFF
// are invalid, as RFC 3629 says.
size_t cti_utf8_seq_len(const unsigned char *s, size_t n);
bool cti_utf8_valid(const char *s, size_t n);

void cti_json_string(cti_strbuf *b, const char *s); // NULL writes null
void cti_json_number(cti_strbuf *b, double v);

#ifdef __cplusplus
}
#endif

#endif
