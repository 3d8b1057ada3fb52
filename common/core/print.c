// SPDX-License-Identifier: MIT
//
// print: tensors as PyTorch prints them, byte for byte.
//
// Invariant: ct_tensor_str(t) equals Python's str(t) for a tensor with the
// same dtype, shape, values and device under PyTorch's default print options
// (precision 4, threshold 1000, edgeitems 3, linewidth 80, sci_mode None).
// Each step below is a transcription of torch/_tensor_str.py:
//
//  1. Which elements show. A tensor of more than 1000 elements is summarized:
//     every dimension longer than 6 shows its first 3 and last 3 entries and
//     a "..." between them. The shown elements are a product of per-dimension
//     index sets, so they are fetched as at most 2^ndim narrowed blocks
//     (ct_copy_to_host, which also brings CUDA tensors to the host) into one
//     compact array: `get_summarized_data`.
//  2. One formatter for all shown elements (`_Formatter`). Integers and bools
//     are right-aligned to the widest "{}". Floats (f16/bf16 read as the
//     float32 they widen to, everything computed in double) look only at the
//     nonzero finite values: if all are integral it is int mode ("3.", width
//     of "%.0f" plus the dot) unless max/min > 1000 or max > 1e8, then
//     scientific ("%.4e"); otherwise fixed "%.4f" unless max/min > 1000,
//     max > 1e8 or min < 1e-4, then scientific. nan/inf never set a width and
//     print as "nan", "inf", "-inf" (Python drops the sign of a NaN).
//  3. Nested brackets (`_tensor_str_with_formatter`, `_vector_str`): a row
//     holds floor((80 - indent) / (width + 2)) elements, continuation lines
//     are indented by indent + 1; slices of a k-d tensor are separated by ","
//     and k - 1 newlines; "tensor(" sets the first indent to 7.
//  4. Suffixes (`_str_intern`, `_add_suffixes`), in this order: device (CUDA
//     tensors: "device='cuda:N'"), size (empty tensors that are not 1-d),
//     dtype (non-empty: unless float32, int64 or bool; empty: unless
//     float32). A suffix moves to a new line, indented 7, when the last
//     line's length as PyTorch counts it (len - rfind('\n') + 1, two more than
//     the real length) plus the suffix plus 2 exceeds 80.
// Python's "{:.4f}" / "{:.4e}" / "{:.0f}" and C's printf are both correctly
// rounded (ties to even) from the same double, so they agree digit for digit.
#include "print.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "strbuf.h"
#include "sync_point.h"

enum { PR_PRECISION = 4, PR_THRESHOLD = 1000, PR_EDGEITEMS = 3, PR_LINEWIDTH = 80 };

// ---- the shown elements ---------------------------------------------------------
// The elements that will be printed, in a compact row-major array whose
// dimension d has vis[d] entries: all size[d] of them, or 2 * edgeitems when
// the dimension is cut (summarized).
typedef struct shown {
  int ndim;
  int64_t size[CT_MAX_DIMS];
  int64_t vis[CT_MAX_DIMS];
  int64_t cstride[CT_MAX_DIMS]; // strides of the compact array
  bool cut[CT_MAX_DIMS];
  int64_t n;      // elements in the compact array
  ct_dtype dtype;
  bool floating;
  double *f;      // floating dtypes: values (f16/bf16 widened exactly)
  int64_t *i;     // integer and bool dtypes: values
} shown;

static int64_t load_int(const unsigned char *p, ct_dtype dt) {
  switch (dt) {
  case CT_BOOL:
  case CT_U8: return *p;
  case CT_I32: {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  default: {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  }
}

// Copies one block (a view of t selecting, on each cut dimension, either its
// head or its tail) to the host and scatters it into the compact array.
// Enters with `parts` bit d = 1 for "tail of cut dimension d"; leaves with
// those compact elements written, or an error (nothing leaked).
static int fetch_block(const ct_tensor *t, shown *s, unsigned parts, unsigned char *tmp) {
  ct_tensor *v = ct_retain((ct_tensor *)t);
  int64_t bshape[CT_MAX_DIMS], boff[CT_MAX_DIMS];
  int64_t bn = 1;
  for (int d = 0; d < s->ndim; ++d) {
    bshape[d] = s->vis[d];
    boff[d] = 0;
    if (s->cut[d]) {
      bool tail = (parts >> d) & 1u;
      bshape[d] = PR_EDGEITEMS;
      boff[d] = tail ? PR_EDGEITEMS : 0;
      ct_tensor *nv = ct_narrow(v, d, tail ? s->size[d] - PR_EDGEITEMS : 0, PR_EDGEITEMS);
      ct_free(v);
      if (!nv) return ct_last_status() != CT_OK ? (int)ct_last_status() : CT_ERR_VALUE;
      v = nv;
    }
    bn *= bshape[d];
  }
  size_t es = ct_dtype_size(s->dtype);
  int rc = ct_copy_to_host(v, tmp, (size_t)bn * es);
  ct_free(v);
  if (rc != CT_OK) return rc;

  int64_t idx[CT_MAX_DIMS] = {0};
  for (int64_t k = 0; k < bn; ++k) {
    int64_t c = 0;
    for (int d = 0; d < s->ndim; ++d) c += (boff[d] + idx[d]) * s->cstride[d];
    const unsigned char *p = tmp + (size_t)k * es;
    if (s->floating) s->f[c] = ct_load_f64(p, s->dtype);
    else s->i[c] = load_int(p, s->dtype);
    for (int d = s->ndim - 1; d >= 0; --d) { // next index, row-major
      if (++idx[d] < bshape[d]) break;
      idx[d] = 0;
    }
  }
  return CT_OK;
}

// Enters with a non-empty tensor; leaves with s filled (free with
// shown_free) or an error.
static int shown_fetch(const ct_tensor *t, shown *s) {
  memset(s, 0, sizeof *s);
  s->ndim = ct_ndim(t);
  s->dtype = ct_dtype_of(t);
  s->floating = ct_dtype_is_floating(s->dtype);
  bool summarize = ct_numel(t) > PR_THRESHOLD;
  int ncut = 0;
  for (int d = 0; d < s->ndim; ++d) {
    s->size[d] = ct_size(t, d);
    s->cut[d] = summarize && s->size[d] > 2 * PR_EDGEITEMS;
    s->vis[d] = s->cut[d] ? 2 * PR_EDGEITEMS : s->size[d];
    ncut += s->cut[d];
  }
  s->n = 1;
  for (int d = s->ndim - 1; d >= 0; --d) {
    s->cstride[d] = s->n;
    s->n *= s->vis[d];
  }
  int64_t block = s->n >> ncut; // every block has the same number of elements
  size_t es = ct_dtype_size(s->dtype);
  unsigned char *tmp = malloc((size_t)block * es);
  if (s->floating) s->f = malloc((size_t)s->n * sizeof(double));
  else s->i = malloc((size_t)s->n * sizeof(int64_t));
  if (!tmp || (!s->f && !s->i)) {
    free(tmp);
    free(s->f);
    free(s->i);
    return ct_fail(CT_ERR_OOM, "ct_tensor_str: out of host memory for %" PRId64
                   " shown elements", s->n);
  }
  // Enumerate the blocks: every combination of head/tail on the cut dims.
  unsigned cutmask = 0;
  for (int d = 0; d < s->ndim; ++d)
    if (s->cut[d]) cutmask |= 1u << d;
  int rc = CT_OK;
  unsigned parts = 0;
  do {
    rc = fetch_block(t, s, parts, tmp);
    parts = (parts - cutmask) & cutmask; // next subset of cutmask
  } while (rc == CT_OK && parts != 0);
  free(tmp);
  if (rc != CT_OK) {
    free(s->f);
    free(s->i);
  }
  return rc;
}

static void shown_free(shown *s) {
  free(s->f);
  free(s->i);
}

// ---- the formatter ------------------------------------------------------------------
typedef struct formatter {
  bool floating, int_mode, sci;
  int width;
} formatter;

// Writes one element as _Formatter.format does before padding; returns its length.
static int format_raw(const formatter *fm, const shown *s, int64_t k, char *out, size_t cap) {
  if (!fm->floating) {
    if (s->dtype == CT_BOOL) return snprintf(out, cap, "%s", s->i[k] ? "True" : "False");
    return snprintf(out, cap, "%" PRId64, s->i[k]);
  }
  double v = s->f[k];
  if (isnan(v)) return snprintf(out, cap, "nan"); // Python prints no sign for NaN
  if (fm->sci) return snprintf(out, cap, "%.*e", PR_PRECISION, v);
  if (fm->int_mode) { // "3." marks a float; inf stays "inf"
    if (isinf(v)) return snprintf(out, cap, "%s", v > 0 ? "inf" : "-inf");
    return snprintf(out, cap, "%.0f.", v);
  }
  return snprintf(out, cap, "%.*f", PR_PRECISION, v);
}

static void formatter_init(formatter *fm, const shown *s) {
  fm->floating = s->floating;
  fm->int_mode = true;
  fm->sci = false;
  fm->width = 1;
  char buf[400]; // "%.0f" of DBL_MAX has 309 digits
  if (!s->floating) {
    for (int64_t k = 0; k < s->n; ++k) {
      int w = format_raw(fm, s, k, buf, sizeof buf);
      if (w > fm->width) fm->width = w;
    }
    return;
  }
  double mn = INFINITY, mx = 0.0;
  int64_t count = 0;
  for (int64_t k = 0; k < s->n; ++k) {
    double v = s->f[k];
    if (!isfinite(v) || v == 0.0) continue;
    ++count;
    double a = fabs(v);
    if (a < mn) mn = a;
    if (a > mx) mx = a;
    if (v != ceil(v)) fm->int_mode = false;
  }
  if (count == 0) return; // no valid number: int mode, width 1
  fm->sci = mx / mn > 1000.0 || mx > 1.0e8 || (!fm->int_mode && mn < 1.0e-4);
  for (int64_t k = 0; k < s->n; ++k) {
    double v = s->f[k];
    if (!isfinite(v) || v == 0.0) continue;
    int w = format_raw(fm, s, k, buf, sizeof buf); // int mode's dot is the "+ 1"
    if (w > fm->width) fm->width = w;
  }
}

static void put_elem(cti_strbuf *b, const formatter *fm, const shown *s, int64_t k) {
  char buf[400];
  int n = format_raw(fm, s, k, buf, sizeof buf);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
  cti_sb_repeat(b, ' ', fm->width - n);
  cti_sb_putn(b, buf, (size_t)n);
}

// ---- nested brackets ---------------------------------------------------------------------
// The entries of dimension d in print order: compact indices, with -1 for "...".
static int64_t entries(const shown *s, int d, int64_t *out) {
  int64_t n = 0;
  for (int64_t j = 0; j < s->vis[d]; ++j) {
    if (s->cut[d] && j == PR_EDGEITEMS) out[n++] = -1;
    out[n++] = j;
  }
  return n;
}

// _tensor_str_with_formatter for the sub-tensor at compact offset `base`
// whose first dimension is d, printed at `indent`.
static void put_tensor(cti_strbuf *b, const formatter *fm, const shown *s, int d, int64_t base,
                       int indent) {
  if (s->ndim == 0) {
    put_elem(b, fm, s, 0);
    return;
  }
  int64_t ent[2 * PR_EDGEITEMS + 1];
  int64_t *list = ent;
  int64_t n;
  if (s->vis[d] + 1 > (int64_t)(sizeof ent / sizeof ent[0])) {
    list = malloc((size_t)(s->vis[d] + 1) * sizeof *list);
    if (!list) {
      b->oom = true;
      return;
    }
  }
  n = entries(s, d, list);
  cti_sb_puts(b, "[");
  if (d == s->ndim - 1) { // _vector_str
    int element_length = fm->width + 2;
    int per_line = (PR_LINEWIDTH - indent) / element_length;
    if (PR_LINEWIDTH - indent < 0 || per_line < 1) per_line = 1;
    for (int64_t j = 0; j < n; ++j) {
      if (j > 0) {
        if (j % per_line == 0) {
          cti_sb_puts(b, ",\n");
          cti_sb_repeat(b, ' ', indent + 1);
        } else {
          cti_sb_puts(b, ", ");
        }
      }
      if (list[j] < 0) cti_sb_puts(b, " ...");
      else put_elem(b, fm, s, base + list[j]);
    }
  } else {
    int sub_dims = s->ndim - d; // the dim() of this sub-tensor
    for (int64_t j = 0; j < n; ++j) {
      if (j > 0) {
        cti_sb_puts(b, ",");
        cti_sb_repeat(b, '\n', sub_dims - 1);
        cti_sb_repeat(b, ' ', indent + 1);
      }
      if (list[j] < 0) cti_sb_puts(b, "...");
      else put_tensor(b, fm, s, d + 1, base + list[j] * s->cstride[d], indent + 1);
    }
  }
  cti_sb_puts(b, "]");
  if (list != ent) free(list);
}

// ---- suffixes ---------------------------------------------------------------------------------
// _add_suffixes with force_newline = false.
static void add_suffixes(cti_strbuf *b, char suffixes[][64], int nsuffixes, int indent) {
  long last_nl = -1;
  for (size_t k = 0; k < b->len; ++k)
    if (b->s[k] == '\n') last_nl = (long)k;
  long last_line_len = (long)b->len - last_nl + 1; // PyTorch's count, kept as is
  for (int k = 0; k < nsuffixes; ++k) {
    long suffix_len = (long)strlen(suffixes[k]);
    if (last_line_len + suffix_len + 2 > PR_LINEWIDTH) {
      cti_sb_puts(b, ",\n");
      cti_sb_repeat(b, ' ', indent);
      last_line_len = indent + suffix_len;
    } else {
      cti_sb_puts(b, ", ");
      last_line_len += suffix_len + 2;
    }
    cti_sb_puts(b, suffixes[k]);
  }
  cti_sb_puts(b, ")");
}

static char *tensor_str(const ct_tensor *t) {
  static const char prefix[] = "tensor(";
  const int indent = (int)sizeof prefix - 1;
  ct_dtype dt = ct_dtype_of(t);
  ct_device dev = ct_device_of(t);
  int ndim = ct_ndim(t);
  int64_t numel = ct_numel(t);

  char suffixes[3][64];
  int ns = 0;
  if (dev.type == CT_CUDA) snprintf(suffixes[ns++], 64, "device='cuda:%d'", dev.index);
  if (numel == 0) {
    if (ndim != 1) {
      cti_strbuf sz = {0};
      cti_sb_puts(&sz, "size=(");
      for (int d = 0; d < ndim; ++d) cti_sb_printf(&sz, d ? ", %" PRId64 : "%" PRId64, ct_size(t, d));
      cti_sb_puts(&sz, ")");
      if (sz.oom || sz.len >= 64) { // 8 dims of 0..2^63 could not fit; never happens
        cti_sb_free(&sz);
        ct_fail(CT_ERR_VALUE, "ct_tensor_str: shape too long to print");
        return NULL;
      }
      memcpy(suffixes[ns++], sz.s, sz.len + 1);
      cti_sb_free(&sz);
    }
    if (dt != CT_F32) snprintf(suffixes[ns++], 64, "dtype=%s", ct_dtype_torch_name(dt));
  } else if (dt != CT_F32 && dt != CT_I64 && dt != CT_BOOL) {
    snprintf(suffixes[ns++], 64, "dtype=%s", ct_dtype_torch_name(dt));
  }

  cti_strbuf b = {0};
  cti_sb_puts(&b, prefix);
  if (numel == 0) {
    cti_sb_puts(&b, "[]");
  } else {
    shown s;
    int rc = shown_fetch(t, &s);
    if (rc != CT_OK) {
      cti_sb_free(&b);
      return NULL;
    }
    formatter fm;
    formatter_init(&fm, &s);
    put_tensor(&b, &fm, &s, 0, 0, indent);
    shown_free(&s);
  }
  add_suffixes(&b, suffixes, ns, indent);
  char *str = cti_sb_take(&b);
  if (!str)
    ct_fail(CT_ERR_OOM, "ct_tensor_str: out of host memory for the string of a tensor "
                        "of %" PRId64 " elements", numel);
  return str;
}

// Printing reads the values on the host, so it waits for the device (as
// print(x) does in PyTorch): a sync point named `op`, unless there are no values.
static char *str_synced(const char *op, const ct_tensor *t) {
  if (!t) {
    ct_fail(CT_ERR_VALUE, "ct_tensor_str: expected a tensor, got NULL");
    return NULL;
  }
  bool reads = ct_numel(t) > 0;
  if (reads && cti_sync_begin(op, ct_device_of(t), CTI_SYNC_REPORT) != CT_OK) return NULL;
  char *s = tensor_str(t);
  if (reads) cti_sync_end();
  return s;
}

char *ct_tensor_str(const ct_tensor *t) { return str_synced("ct_tensor_str", t); }

int ct_print(FILE *f, const ct_tensor *t) {
  if (!f) return ct_fail(CT_ERR_VALUE, "ct_print: expected a FILE, got NULL");
  char *s = str_synced("ct_print", t);
  if (!s) return ct_last_status() != CT_OK ? (int)ct_last_status() : CT_ERR_VALUE;
  int bad = fputs(s, f) < 0 || fputc('\n', f) == EOF;
  free(s);
  if (bad) return ct_fail(CT_ERR_IO, "ct_print: writing to the stream failed");
  return CT_OK;
}
