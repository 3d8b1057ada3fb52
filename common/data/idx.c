// SPDX-License-Identifier: MIT
//
// idx: the IDX file format of MNIST and Fashion-MNIST, read with zlib.
//
// An IDX file is a 4-byte magic, the dims, then the payload, every number
// big-endian:
//   byte 0, 1   0x00 0x00
//   byte 2      the element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32,
//               0x0D f32, 0x0E f64
//   byte 3      the number of dims, n (1..CT_MAX_DIMS here)
//   then        n dims, each a u32
//   then        prod(dims) elements, row-major
// Files are distributed gzip'd (train-images-idx3-ubyte.gz); we tell the two
// apart by gzip's magic, 1f 8b, in the first two bytes, which an IDX file
// never starts with.
//
// What a reader of untrusted files must not do, and how this one avoids it:
//  - trust the dims: their product is computed with overflow checks and
//    compared with what the file can hold BEFORE anything is allocated (the
//    raw file's size; for gzip, the compressed size times deflate's largest
//    ratio, 1032:1), so a 100-byte file that claims 4G x 4G elements fails at
//    once instead of asking for exabytes;
//  - accept a short file: the payload must be all there (truncation is an
//    error naming how many bytes were missing), and nothing may follow it
//    (extra bytes mean the dims are wrong);
//  - ignore a damaged gzip stream: zlib checks the CRC at the end of the
//    stream, which we reach by reading one byte past the payload.
// Element types are widened where ct has no such dtype: i8 and i16 -> i32.
// Every failure is CT_ERR_IO with a message "ct_idx_read: PATH: what".
#define _POSIX_C_SOURCE 200809L // fileno, fdopen
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "checkpoint.h" // ct_open_input
#include "data.h"
#include "error.h"
#include "tensor_impl.h"

// A byte source: a plain FILE* or a gzFile.
typedef struct idx_src {
  const char *path;
  FILE *f;
  gzFile gz;
} idx_src;

// Reads up to n bytes; returns how many were read (fewer at the end of the
// data), or -1 on a read error (recorded).
static int64_t src_read(idx_src *s, void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    if (s->f) {
      size_t got = fread((char *)buf + done, 1, n - done, s->f);
      done += got;
      if (got == 0) {
        if (ferror(s->f)) {
          ct_fail(CT_ERR_IO, "ct_idx_read: %s: read error: %s", s->path, strerror(errno));
          return -1;
        }
        break;
      }
    } else {
      size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
      int got = gzread(s->gz, (char *)buf + done, (unsigned)chunk);
      if (got < 0) {
        int zerr = 0;
        const char *msg = gzerror(s->gz, &zerr);
        ct_fail(CT_ERR_IO, "ct_idx_read: %s: corrupt gzip data (%s)", s->path,
                zerr == Z_ERRNO ? strerror(errno) : msg);
        return -1;
      }
      if (got == 0) {
        // zlib reports a stream cut short as an error only through gzerror.
        int zerr = 0;
        const char *msg = gzerror(s->gz, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
          ct_fail(CT_ERR_IO, "ct_idx_read: %s: corrupt gzip data (%s)", s->path, msg);
          return -1;
        }
        break;
      }
      done += (size_t)got;
    }
  }
  return (int64_t)done;
}

static void src_close(idx_src *s) {
  if (s->f) fclose(s->f);
  if (s->gz) gzclose(s->gz);
}

// The IDX type byte -> (bytes per element in the file, ct dtype), or 0.
static size_t idx_type(uint8_t code, ct_dtype *dt, const char **name) {
  switch (code) {
  case 0x08: *dt = CT_U8, *name = "u8"; return 1;
  case 0x09: *dt = CT_I32, *name = "i8"; return 1;
  case 0x0B: *dt = CT_I32, *name = "i16"; return 2;
  case 0x0C: *dt = CT_I32, *name = "i32"; return 4;
  case 0x0D: *dt = CT_F32, *name = "f32"; return 4;
  case 0x0E: *dt = CT_F64, *name = "f64"; return 8;
  default: return 0;
  }
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Converts n big-endian file elements of `esize` bytes, type `code`, in
// place into host-order elements of `dt` (i8/i16 widen into i32: the buffer
// was sized for the widened type and the file bytes sit at its start, so
// convert from the back to the front).
static void convert(uint8_t code, void *buf, int64_t n) {
  uint8_t *b = buf;
  switch (code) {
  case 0x08: break;
  case 0x09: {
    int32_t *o = buf;
    for (int64_t i = n - 1; i >= 0; --i) o[i] = (int8_t)b[i];
    break;
  }
  case 0x0B: {
    int32_t *o = buf;
    for (int64_t i = n - 1; i >= 0; --i) o[i] = (int16_t)(uint16_t)(b[2 * i] << 8 | b[2 * i + 1]);
    break;
  }
  case 0x0C:
  case 0x0D:
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v = be32(b + 4 * i);
      memcpy(b + 4 * i, &v, 4);
    }
    break;
  case 0x0E:
    for (int64_t i = 0; i < n; ++i) {
      uint64_t v = (uint64_t)be32(b + 8 * i) << 32 | be32(b + 8 * i + 4);
      memcpy(b + 8 * i, &v, 8);
    }
    break;
  default: break;
  }
}

// Deflate cannot shrink data by more than about 1032:1; a gzip file of
// `compressed` bytes therefore never holds more than this many bytes.
static uint64_t gzip_capacity(uint64_t compressed) {
  return compressed > UINT64_MAX / 1100 ? UINT64_MAX : compressed * 1100 + 1024;
}

ct_tensor *ct_idx_read(const char *path) {
  if (!path) {
    ct_fail(CT_ERR_VALUE, "ct_idx_read: NULL path");
    return NULL;
  }
  idx_src s = {.path = path};
  s.f = ct_open_input("ct_idx_read", path, "give the path of an IDX file (gzip'd or not)");
  if (!s.f) return NULL;
  struct stat st;
  if (fstat(fileno(s.f), &st) != 0 || !S_ISREG(st.st_mode)) {
    ct_fail(CT_ERR_IO, "ct_idx_read: %s: not a regular file", path);
    fclose(s.f);
    return NULL;
  }
  uint64_t file_size = (uint64_t)st.st_size;
  uint8_t head[4 + 4 * CT_MAX_DIMS];
  size_t got = fread(head, 1, 2, s.f);
  bool gzip = got == 2 && head[0] == 0x1f && head[1] == 0x8b;
  if (gzip) {
    fclose(s.f);
    s.f = NULL;
    s.gz = gzopen(path, "rb");
    if (!s.gz) {
      ct_fail(CT_ERR_IO, "ct_idx_read: %s: %s", path, errno ? strerror(errno) : "cannot open");
      return NULL;
    }
    gzbuffer(s.gz, 1u << 17);
  } else {
    rewind(s.f);
  }
  const char *kind = gzip ? "gzip'd IDX" : "IDX";
  ct_tensor *t = NULL;

  int64_t n = src_read(&s, head, 4);
  if (n < 0) goto done;
  if (n < 4) {
    ct_fail(CT_ERR_IO, "ct_idx_read: %s: truncated %s file: %" PRId64 " of the 4 magic bytes", path,
            kind, n);
    goto done;
  }
  if (head[0] != 0 || head[1] != 0) {
    ct_fail(CT_ERR_IO,
            "ct_idx_read: %s: not an IDX file (magic starts %02x %02x, expected 00 00 and a type "
            "byte)",
            path, head[0], head[1]);
    goto done;
  }
  ct_dtype dt = CT_U8;
  const char *tname = "";
  size_t esize = idx_type(head[2], &dt, &tname);
  if (!esize) {
    ct_fail(CT_ERR_IO,
            "ct_idx_read: %s: unknown IDX element type 0x%02x (expected 0x08 u8, 0x09 i8, 0x0B "
            "i16, 0x0C i32, 0x0D f32 or 0x0E f64)",
            path, head[2]);
    goto done;
  }
  int ndim = head[3];
  if (ndim < 1 || ndim > CT_MAX_DIMS) {
    ct_fail(CT_ERR_IO, "ct_idx_read: %s: %d dims in the header (1 to %d are supported)", path, ndim,
            CT_MAX_DIMS);
    goto done;
  }
  uint8_t *dimb = head + 4;
  n = src_read(&s, dimb, 4 * (size_t)ndim);
  if (n < 0) goto done;
  if (n < 4 * ndim) {
    ct_fail(CT_ERR_IO, "ct_idx_read: %s: truncated %s file: the header is cut after %" PRId64
            " of its %d bytes", path, kind, 4 + n, 4 + 4 * ndim);
    goto done;
  }
  ct_shape shape = {.ndim = ndim};
  // The product of the dims, and of the non-zero ones (what the strides of
  // an empty tensor multiply up to): neither may overflow.
  uint64_t numel = 1, strides = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    shape.d[i] = be32(dimb + 4 * i);
    uint64_t d = (uint64_t)shape.d[i];
    if (d && strides > (uint64_t)INT64_MAX / 8 / d) overflow = true;
    else if (d) strides *= d;
    numel *= d;
  }
  if (overflow) numel = UINT64_MAX;
  char sbuf[160];
  ct_shape_str(shape, sbuf, sizeof sbuf);
  uint64_t header = 4 + 4 * (uint64_t)ndim;
  uint64_t payload = overflow ? UINT64_MAX : numel * esize;
  if (!gzip) {
    if (overflow || header + payload != file_size) {
      if (!overflow && header + payload > file_size)
        ct_fail(CT_ERR_IO,
                "ct_idx_read: %s: truncated IDX file: dims %s of %s need %" PRIu64
                " payload bytes, the file has %" PRIu64,
                path, sbuf, tname, payload, file_size - header);
      else if (overflow)
        ct_fail(CT_ERR_IO, "ct_idx_read: %s: dims %s of %s are larger than any file (%" PRIu64
                " bytes here)", path, sbuf, tname, file_size);
      else
        ct_fail(CT_ERR_IO,
                "ct_idx_read: %s: dims %s of %s need %" PRIu64 " payload bytes, but the file has %"
                PRIu64 " (%" PRIu64 " extra bytes: wrong dims?)",
                path, sbuf, tname, payload, file_size - header, file_size - header - payload);
      goto done;
    }
  } else if (overflow || payload > gzip_capacity(file_size)) {
    ct_fail(CT_ERR_IO,
            "ct_idx_read: %s: dims %s of %s claim more data than a %" PRIu64
            "-byte gzip file can hold",
            path, sbuf, tname, file_size);
    goto done;
  }

  t = cti_tensor_new(shape, dt, ct_device_cpu(), false);
  if (!t) goto done;
  n = src_read(&s, ct_data_ptr(t), (size_t)payload);
  if (n < 0) goto fail;
  if ((uint64_t)n < payload) {
    ct_fail(CT_ERR_IO,
            "ct_idx_read: %s: truncated %s file: dims %s of %s need %" PRIu64
            " payload bytes, got %" PRId64,
            path, kind, sbuf, tname, payload, n);
    goto fail;
  }
  uint8_t extra[64];
  n = src_read(&s, extra, sizeof extra); // also makes zlib check the CRC
  if (n < 0) goto fail;
  if (n > 0) {
    ct_fail(CT_ERR_IO,
            "ct_idx_read: %s: more data than dims %s of %s say (%" PRIu64
            " payload bytes, then more): wrong dims?",
            path, sbuf, tname, payload);
    goto fail;
  }
  convert(head[2], ct_data_ptr(t), (int64_t)numel);
  goto done;
fail:
  ct_free(t);
  t = NULL;
done:
  src_close(&s);
  return t;
}
