// SPDX-License-Identifier: MIT
//
// test_strbuf: the runtime's string buffer, JSON writer and atomic file
// writer (strbuf.h, atomic_file.h), the helpers every writer of text and
// files in the runtime goes through.
//
// Invariants checked, against independent references:
//  - the buffer holds exactly what was appended (compared with snprintf and
//    memset), stays NUL-terminated, and hands its string over with take;
//  - cti_json_string writes what Python's json.dumps(s, ensure_ascii=False)
//    writes (the expected strings below were printed by Python 3's json
//    module), and for every one-byte input and random inputs the output is
//    an RFC 8259 string literal that a decoder written here from the RFC's
//    grammar reads back as the input's code points (UTF-8 decoded, a byte
//    outside valid UTF-8 as its Latin-1 character);
//  - cti_json_number reads back (strtod) as the same double, with the fewest
//    of 15, 16, 17 significant digits that do, and NaN/inf are null;
//  - the atomic writer replaces a file whole, keeps its permission bits,
//    and on every failure (a write past the file-size limit, an abort, a
//    missing directory, a rename over a directory) leaves the old file
//    byte-identical, removes its temporary and names the path in the message;
//  - a symbolic link (a chain, a dangling one) is followed and stays a link,
//    a loop is an error; /dev/null, /dev/full and a FIFO are written through
//    and stay devices (a FIFO with no reader fails at once); a directory or a
//    socket is refused; cti_atomic_check reports the same without writing
//    (/dev/full's ENOSPC included).
#define _POSIX_C_SOURCE 200809L // mkdtemp, setrlimit, fileno

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "atomic_file.h"
#include "strbuf.h"
#include "testutil.h"

static char tmpdir[256];

static const char *tpath(const char *name) { return tu_scratch_path(tmpdir, name); }

// ---- the buffer -----------------------------------------------------------------------------
static void test_buffer(void **state) {
  (void)state;
  cti_strbuf b = {0};
  char *s = cti_sb_take(&b); // nothing appended: "", not NULL
  assert_non_null(s);
  assert_string_equal(s, "");
  free(s);

  // Many appends of every kind, mirrored into a plain array by snprintf.
  char *ref = calloc(1 << 20, 1);
  assert_non_null(ref);
  size_t n = 0;
  for (int i = 0; i < 5000; ++i) {
    switch (i % 4) {
    case 0:
      cti_sb_printf(&b, "[%d:%.3f]", i, i / 7.0);
      n += (size_t)snprintf(ref + n, (1 << 20) - n, "[%d:%.3f]", i, i / 7.0);
      break;
    case 1:
      cti_sb_puts(&b, "ab");
      memcpy(ref + n, "ab", 2), n += 2;
      break;
    case 2:
      cti_sb_repeat(&b, 'x', i % 13);
      memset(ref + n, 'x', (size_t)(i % 13)), n += (size_t)(i % 13);
      break;
    default:
      cti_sb_putn(&b, "\0z", 2); // embedded NUL bytes are kept
      memcpy(ref + n, "\0z", 2), n += 2;
    }
    assert_false(b.oom);
    assert_int_equal(b.len, n);
    assert_int_equal(b.s[b.len], '\0');
  }
  assert_memory_equal(b.s, ref, n);
  cti_sb_repeat(&b, 'y', 0); // nothing
  cti_sb_repeat(&b, 'y', -3);
  assert_int_equal(b.len, n);
  size_t len = b.len;
  s = cti_sb_take(&b);
  assert_non_null(s);
  assert_memory_equal(s, ref, len);
  assert_null(b.s);
  assert_int_equal(b.len, 0);
  free(s);
  free(ref);

  // A buffer that ran out of memory drops appends and gives NULL.
  cti_strbuf o = {0};
  cti_sb_puts(&o, "abc");
  o.oom = true;
  cti_sb_puts(&o, "def");
  assert_int_equal(o.len, 3);
  assert_null(cti_sb_take(&o));
  assert_null(o.s);
}

// ---- JSON strings ----------------------------------------------------------------------------
static char *json_of(const char *s) {
  cti_strbuf b = {0};
  cti_json_string(&b, s);
  char *out = cti_sb_take(&b);
  assert_non_null(out);
  return out;
}

// Python 3: print(json.dumps(s, ensure_ascii=False)) for each s, as C literals.
static void test_json_like_python(void **state) {
  (void)state;
  char all[128];
  for (int i = 1; i < 128; ++i) all[i - 1] = (char)i; // every ASCII byte but NUL
  all[127] = '\0';
  static const struct {
    const char *in, *py;
  } cases[] = {
      {NULL, "\"\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\\u0010\\u0011"
             "\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f "
             "!\\\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\x7f"
             "\""},
      // 'h\u00e9llo \u4e2d\u6587 \U0001F600 \u2028': 2-, 3- and 4-byte UTF-8 pass through
      {"h\xc3\xa9llo \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xe2\x80\xa8",
       "\"h\xc3\xa9llo \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xe2\x80\xa8\""},
      {"a\"b\\c/d", "\"a\\\"b\\\\c/d\""}, // '/' is not escaped
      {"", "\"\""},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
    char *got = json_of(cases[k].in ? cases[k].in : all);
    assert_string_equal(got, cases[k].py);
    free(got);
  }
  cti_strbuf b = {0};
  cti_json_string(&b, NULL);
  char *got = cti_sb_take(&b);
  assert_string_equal(got, "null");
  free(got);
}

// An RFC 8259 string decoder, written from the grammar (section 7), kept apart
// from the writer: "\"" chars "\"", a char being an unescaped code point
// (U+0020..U+10FFFF but '"' and '\'), or one of \" \\ \/ \b \f \n \r \t
// \uXXXX. Returns the number of code points decoded into cp, or -1 when s is
// not exactly one such literal.
static long rfc_decode(const char *s, uint32_t *cp, long cap) {
  const unsigned char *p = (const unsigned char *)s;
  if (*p++ != '"') return -1;
  long n = 0;
  for (;;) {
    if (n >= cap) return -1;
    unsigned c = *p;
    if (c == '"') return p[1] == '\0' ? n : -1;
    if (c < 0x20) return -1; // control characters must be escaped
    if (c == '\\') {
      c = p[1];
      p += 2;
      switch (c) {
      case '"': cp[n++] = '"'; break;
      case '\\': cp[n++] = '\\'; break;
      case '/': cp[n++] = '/'; break;
      case 'b': cp[n++] = 0x08; break;
      case 'f': cp[n++] = 0x0c; break;
      case 'n': cp[n++] = 0x0a; break;
      case 'r': cp[n++] = 0x0d; break;
      case 't': cp[n++] = 0x09; break;
      case 'u': {
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
          int h = p[k];
          int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return -1;
          v = v * 16 + (uint32_t)d;
        }
        p += 4;
        cp[n++] = v;
        break;
      }
      default: return -1;
      }
      continue;
    }
    // UTF-8 (RFC 3629): lead byte, continuation bytes, shortest form only.
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len) return -1;
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      if ((p[k] & 0xC0) != 0x80) return -1;
      v = (v << 6) | (p[k] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    cp[n++] = v;
    p += len;
  }
}

// The code points a JSON writer must produce for the C string s: its UTF-8
// decoded, each byte outside a valid sequence as U+00XX.
static long expected_points(const unsigned char *s, size_t n, uint32_t *cp) {
  long k = 0;
  for (size_t i = 0; i < n;) {
    size_t len = cti_utf8_seq_len(s + i, n - i);
    if (!len) {
      cp[k++] = s[i++];
      continue;
    }
    uint32_t v = len == 1 ? s[i] : len == 2 ? (s[i] & 0x1Fu) : len == 3 ? (s[i] & 0x0Fu) : (s[i] & 0x07u);
    for (size_t j = 1; j < len; ++j) v = (v << 6) | (s[i + j] & 0x3Fu);
    cp[k++] = v;
    i += len;
  }
  return k;
}

static void check_round_trip(const unsigned char *s, size_t n) {
  char *in = malloc(n + 1);
  memcpy(in, s, n);
  in[n] = '\0';
  char *out = json_of(in);
  uint32_t want[64], got[64];
  long nw = expected_points(s, n, want);
  long ng = rfc_decode(out, got, 64);
  if (ng != nw || memcmp(want, got, (size_t)nw * sizeof *want) != 0) {
    char hex[200] = "";
    for (size_t i = 0; i < n && i < 40; ++i) snprintf(hex + strlen(hex), sizeof hex - strlen(hex), "%02x ", s[i]);
    fail_msg("bytes [%s] wrote %s, which decodes to %ld code points (want %ld)", hex, out, ng, nw);
  }
  // Escapes are only the short ones RFC 8259 and Python use for their bytes.
  for (const char *q = strchr(out, '\\'); q; q = strchr(q + 2, '\\'))
    if (q[1] == 'u' && (strncmp(q + 2, "00", 2) || !q[4] || !q[5] || !strchr("0123456789abcdef", q[4]) ||
                        !strchr("0123456789abcdef", q[5])))
      fail_msg("unexpected escape in %s", out);
  free(out);
  free(in);
}

static void test_json_rfc8259(void **state) {
  (void)state;
  // Every single byte (also a lone UTF-8 lead or continuation byte).
  for (int c = 1; c < 256; ++c) {
    unsigned char s[1] = {(unsigned char)c};
    check_round_trip(s, 1);
  }
  // Strings of random bytes biased to UTF-8 structure, and valid sequences
  // cut short or made overlong, surrogates, code points past U+10FFFF.
  static const char *edge[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x9f\x98",
                               "\xe4\xb8", "\xc3", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xc2\x80"};
  for (size_t k = 0; k < sizeof edge / sizeof edge[0]; ++k)
    check_round_trip((const unsigned char *)edge[k], strlen(edge[k]));
  static const unsigned char pool[] = {'a', '"', '\\', '/', 0x01, 0x1f, 0x7f, 0x80, 0xbf, 0xc2, 0xc3,
                                       0xe0, 0xe4, 0xed, 0xf0, 0xf4, 0xf5, 0xff, 0x9f, 0xa9, '\n', '\t'};
  srand((unsigned)tu_seed());
  for (int t = 0; t < 20000; ++t) {
    unsigned char s[24];
    size_t n = (size_t)(rand() % 24);
    for (size_t i = 0; i < n; ++i) s[i] = pool[rand() % (int)sizeof pool];
    check_round_trip(s, n);
  }
}

// ---- JSON numbers ----------------------------------------------------------------------------
static char *number_of(double v) {
  cti_strbuf b = {0};
  cti_json_number(&b, v);
  char *out = cti_sb_take(&b);
  assert_non_null(out);
  return out;
}

static void test_json_number(void **state) {
  (void)state;
  const double special[] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; ++k) {
    char *s = number_of(special[k]);
    assert_string_equal(s, "null");
    free(s);
  }
  // Python's repr agrees on these (shortest round trip).
  const struct {
    double v;
    const char *s;
  } fixed[] = {{0.1, "0.1"}, {1.0 / 3.0, "0.3333333333333333"}, {1e300, "1e+300"}, {-2.5, "-2.5"}};
  for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; ++k) {
    char *s = number_of(fixed[k].v);
    assert_string_equal(s, fixed[k].s);
    free(s);
  }
  srand((unsigned)tu_seed() + 1);
  for (int t = 0; t < 20000; ++t) {
    uint64_t bits = ((uint64_t)rand() << 42) ^ ((uint64_t)rand() << 21) ^ (uint64_t)rand();
    double v;
    memcpy(&v, &bits, sizeof v);
    if (!isfinite(v)) continue;
    char *s = number_of(v);
    char *end;
    double back = strtod(s, &end);
    if (*end || memcmp(&back, &v, sizeof v) != 0) fail_msg("%.17g wrote %s, which reads back as %.17g", v, s, back);
    int digits = 0; // significant digits written: from the first nonzero one
    bool lead = true;
    for (const char *q = s; *q && *q != 'e'; ++q) {
      if (*q >= '1' && *q <= '9') lead = false;
      digits += !lead && *q >= '0' && *q <= '9';
    }
    if (digits > 15) { // then one digit fewer must not have been enough
      char shorter[400];
      snprintf(shorter, sizeof shorter, "%.*g", digits - 1, v);
      if (strtod(shorter, NULL) == v) fail_msg("%.17g wrote %s, but %s reads back too", v, s, shorter);
    }
    free(s);
  }
}

// ---- the atomic writer ----------------------------------------------------------------------
static bool temp_left(void) {
  DIR *d = opendir(tmpdir);
  assert_non_null(d);
  struct dirent *e;
  bool found = false;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) found = true;
  closedir(d);
  return found;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return s;
}

static void assert_file(const char *path, const char *want) {
  size_t n;
  char *got = slurp(path, &n);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(got, want, n);
  free(got);
}

static void test_atomic_replace(void **state) {
  (void)state;
  const char *path = tpath("doc.json");
  TU_OK(cti_write_file_atomically("test", path, "{\"a\": 1}\n", 9));
  assert_file(path, "{\"a\": 1}\n");
  assert_false(temp_left());

  // An overwrite in pieces replaces the whole file and keeps its mode.
  assert_int_equal(chmod(path, 0640), 0);
  cti_atomic_file af;
  TU_OK(cti_atomic_open(&af, "test", path));
  assert_non_null(strstr(af.tmp, ".tmp."));
  assert_int_equal(access(af.tmp, F_OK), 0); // the temporary exists beside the target...
  assert_file(path, "{\"a\": 1}\n");         // ...while the target is still the old file
  assert_int_equal(cti_atomic_write(&af, "new ", 4), 0);
  assert_int_equal(cti_atomic_write(&af, "contents", 8), 0);
  TU_OK(cti_atomic_commit(&af));
  assert_file(path, "new contents");
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0640);
  assert_false(temp_left());

  // A bare file name writes into the working directory.
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(tmpdir), 0);
  TU_OK(cti_write_file_atomically("test", "bare.txt", "b", 1));
  assert_int_equal(chdir(cwd), 0);
  assert_file(tpath("bare.txt"), "b");
  assert_false(temp_left());
}

static void test_atomic_failures(void **state) {
  (void)state;
  const char *path = tpath("keep.bin");
  TU_OK(cti_write_file_atomically("test", path, "old", 3));

  // A write that fails halfway: the file-size limit stops it at 64 KiB.
  size_t big = 1 << 20;
  char *data = malloc(big);
  memset(data, 'z', big);
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 64 * 1024;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  ct_clear_error();
  int rc = cti_write_file_atomically("test_op", path, data, big);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, prev);
  free(data);
  assert_int_equal(rc, CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), "test_op: "));
  assert_non_null(strstr(ct_last_error(), path));
  assert_non_null(strstr(ct_last_error(), "left as it was"));
  assert_file(path, "old");
  assert_false(temp_left());

  // Giving up: the temporary goes, the target stays.
  cti_atomic_file af;
  TU_OK(cti_atomic_open(&af, "test", path));
  cti_atomic_write(&af, "half", 4);
  cti_atomic_abort(&af);
  assert_file(path, "old");
  assert_false(temp_left());

  // A directory that does not exist: nothing is created, the message says why.
  ct_clear_error();
  const char *nodir = tpath("no/such/dir/x.json");
  assert_int_equal(cti_write_file_atomically("test", nodir, "x", 1), CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), nodir));
  assert_non_null(strstr(ct_last_error(), "No such file or directory"));
  assert_int_equal(cti_write_file_atomically("test", tpath(""), "x", 1), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "names a directory"));
  assert_int_equal(cti_write_file_atomically("test", "", "x", 1), CT_ERR_VALUE);

  // The rename fails (the target is a directory with a file in it): the
  // directory and its file are untouched and no temporary is left.
  const char *dir = tpath("adir");
  assert_int_equal(mkdir(dir, 0755), 0);
  const char *inner = tpath("adir/inner");
  TU_OK(cti_write_file_atomically("test", inner, "in", 2));
  ct_clear_error();
  assert_int_equal(cti_write_file_atomically("test", dir, "x", 1), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "is a directory, not a file"));
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_file(inner, "in");
  assert_false(temp_left());
  assert_int_equal(unlink(inner), 0);
  assert_int_equal(rmdir(dir), 0);
}

static bool is_kind(const char *path, mode_t kind, bool follow) {
  struct stat sb;
  if ((follow ? stat(path, &sb) : lstat(path, &sb)) != 0) return false;
  return (sb.st_mode & S_IFMT) == kind;
}

// A symbolic link is followed, never replaced; a chain too; a dangling one
// creates the file it names; a loop is an error that writes nothing.
static void test_atomic_symlinks(void **state) {
  (void)state;
  // tpath's buffers rotate: keep copies of the seven names.
  char real[640], link[640], link2[640], dangling[640], made[640], a[640], b[640];
  snprintf(real, sizeof real, "%s", tpath("real.json"));
  snprintf(link, sizeof link, "%s", tpath("link.json"));
  snprintf(link2, sizeof link2, "%s", tpath("link2.json"));
  snprintf(dangling, sizeof dangling, "%s", tpath("dangling.json"));
  snprintf(made, sizeof made, "%s", tpath("made.json"));
  snprintf(a, sizeof a, "%s", tpath("loop_a"));
  snprintf(b, sizeof b, "%s", tpath("loop_b"));
  TU_OK(cti_write_file_atomically("test", real, "old", 3));
  assert_int_equal(symlink("real.json", link), 0); // relative: relative to its folder
  assert_int_equal(symlink(link, link2), 0);        // absolute, to a link
  TU_OK(cti_write_file_atomically("test", link2, "new", 3));
  assert_true(is_kind(link, S_IFLNK, false));
  assert_true(is_kind(link2, S_IFLNK, false));
  assert_file(real, "new");
  assert_false(temp_left());

  assert_int_equal(symlink("made.json", dangling), 0);
  TU_OK(cti_write_file_atomically("test", dangling, "m", 1));
  assert_true(is_kind(dangling, S_IFLNK, false));
  assert_file(made, "m");

  assert_int_equal(symlink("loop_b", a), 0);
  assert_int_equal(symlink("loop_a", b), 0);
  ct_clear_error();
  assert_int_equal(cti_write_file_atomically("test", a, "x", 1), CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), "too many levels of symbolic links"));
  assert_true(is_kind(a, S_IFLNK, false));
  assert_false(temp_left());
  for (const char *q[] = {real, link, link2, dangling, made, a, b, NULL}, **p = q; *p; ++p) assert_int_equal(unlink(*p), 0);
}

// Devices and FIFOs are written through, in place, and stay what they were.
static void test_atomic_devices(void **state) {
  (void)state;
  TU_OK(cti_atomic_check("test", "/dev/null"));
  TU_OK(cti_write_file_atomically("test", "/dev/null", "gone", 4));
  assert_true(is_kind("/dev/null", S_IFCHR, false));
  if (access("/dev/full", W_OK) == 0) {
    ct_clear_error();
    assert_int_equal(cti_write_file_atomically("test_op", "/dev/full", "x", 1), CT_ERR_IO);
    assert_non_null(strstr(ct_last_error(), "test_op: /dev/full: writing failed: No space left on device"));
    assert_true(is_kind("/dev/full", S_IFCHR, false));
    ct_clear_error(); // the check finds it out before any work (a write of zero bytes)
    assert_int_equal(cti_atomic_check("test_op", "/dev/full"), CT_ERR_IO);
    assert_non_null(strstr(ct_last_error(), "test_op: /dev/full: cannot write to it: No space left on device"));
  }

  const char *fifo = tpath("fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  ct_clear_error(); // nobody reads it: an error at once, not a hang
  assert_int_equal(cti_write_file_atomically("test", fifo, "x", 1), CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), "no process is reading this FIFO"));
  TU_OK(cti_atomic_check("test", fifo)); // writable; the check opens nothing
  int rd = open(fifo, O_RDONLY | O_NONBLOCK);
  assert_true(rd >= 0);
  TU_OK(cti_write_file_atomically("test", fifo, "through", 7));
  char got[16] = {0};
  assert_int_equal(read(rd, got, sizeof got), 7);
  assert_string_equal(got, "through");
  close(rd);
  assert_true(is_kind(fifo, S_IFIFO, false));
  assert_false(temp_left());
  assert_int_equal(unlink(fifo), 0);

  // A socket is refused, untouched.
  const char *sock = tpath("sock");
  int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
  assert_int_equal(bind(sfd, (struct sockaddr *)&sa, sizeof sa), 0);
  ct_clear_error();
  assert_int_equal(cti_write_file_atomically("test", sock, "x", 1), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "is a socket, not a file"));
  assert_true(is_kind(sock, S_IFSOCK, false));
  close(sfd);
  assert_int_equal(unlink(sock), 0);
}

// The check says what open would say, and leaves nothing behind.
static void test_atomic_check(void **state) {
  (void)state;
  const char *fresh = tpath("fresh.json");
  TU_OK(cti_atomic_check("test", fresh));
  assert_int_equal(access(fresh, F_OK), -1);
  assert_false(temp_left());
  const char *nodir = tpath("no/such/dir/x.json");
  ct_clear_error();
  assert_int_equal(cti_atomic_check("test", nodir), CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), "check that the directory exists"));
  assert_int_equal(cti_atomic_check("test", tmpdir), CT_ERR_VALUE);
  if (geteuid() != 0) { // root may write anywhere
    const char *ro = tpath("ro");
    assert_int_equal(mkdir(ro, 0555), 0);
    assert_int_equal(cti_atomic_check("test", tpath("ro/x.json")), CT_ERR_IO);
    assert_non_null(strstr(ct_last_error(), "Permission denied"));
    assert_int_equal(rmdir(ro), 0);
  }
}

static int make_tmpdir(void **state) {
  (void)state;
  return tu_scratch_dir(tmpdir, sizeof tmpdir, "strbuf");
}

static int remove_tmpdir(void **state) {
  (void)state;
  return tu_scratch_remove(tmpdir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffer),          cmocka_unit_test(test_json_like_python),
      cmocka_unit_test(test_json_rfc8259),    cmocka_unit_test(test_json_number),
      cmocka_unit_test(test_atomic_replace),  cmocka_unit_test(test_atomic_failures),
      cmocka_unit_test(test_atomic_symlinks), cmocka_unit_test(test_atomic_devices),
      cmocka_unit_test(test_atomic_check),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
