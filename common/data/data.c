// SPDX-License-Identifier: MIT
//
// data: datasets (torch.utils.data.Dataset and torchvision's FashionMNIST).
//
// A dataset here is a table with a get_batch method: the DataLoader hands it
// a list of sample indices and two contiguous CPU tensors to fill, (n, *x)
// and (n, *y). Batching in the dataset, rather than one __getitem__ call per
// sample as in PyTorch, is what makes a C loader cheap: one call, one tight
// loop, no per-sample tensors.
//
// Invariants:
//  - a dataset is read-only once created, so get_batch may run on several
//    worker threads at once without locks;
//  - get_batch checks everything it is given (tensor shapes, dtypes, device,
//    contiguity, every index) before writing anything.
//
// Fashion-MNIST is read whole at creation (47 MB of u8 pixels for the
// training set) and stays u8 in memory; get_batch converts the chosen
// samples to float32 with a 256-entry table that holds, for every pixel
// value p, ((float)p / 255 - mean) / std computed in float32, the same
// operations in the same precision as torchvision's ToTensor followed by
// Normalize, so the values match PyTorch's bit for bit.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "error.h"
#include "tensor_impl.h"

typedef struct dataset_ops {
  int (*get_batch)(const ct_dataset *ds, const int64_t *idx, int64_t n, ct_tensor *x, ct_tensor *y);
  void (*destroy)(ct_dataset *ds);
} dataset_ops;

struct ct_dataset {
  const dataset_ops *ops;
  const char *name; // for messages: "TensorDataset", "FashionMNIST"
  int64_t len;
  ct_shape x_shape, y_shape; // one sample
  ct_dtype x_dtype, y_dtype;
  // TensorDataset / RandomDataset: contiguous CPU tensors, first dim = len.
  ct_tensor *x, *y;
  // Fashion-MNIST: (len, 28, 28) u8 pixels, (len) u8 labels (the data of
  // the tensors ct_idx_read made, kept in x and y), and the table.
  const uint8_t *pixels, *labels;
  float lut[256];
};

// ---- the generic part ------------------------------------------------------------
int64_t ct_dataset_len(const ct_dataset *ds) { return ds ? ds->len : 0; }
ct_shape ct_dataset_x_shape(const ct_dataset *ds) { return ds ? ds->x_shape : CT_SCALAR_SHAPE; }
ct_shape ct_dataset_y_shape(const ct_dataset *ds) { return ds ? ds->y_shape : CT_SCALAR_SHAPE; }
ct_dtype ct_dataset_x_dtype(const ct_dataset *ds) { return ds ? ds->x_dtype : CT_F32; }
ct_dtype ct_dataset_y_dtype(const ct_dataset *ds) { return ds ? ds->y_dtype : CT_I64; }

// (n, *sample) as a shape; fails when the sample already has CT_MAX_DIMS.
static ct_shape batch_shape(int64_t n, ct_shape sample) {
  ct_shape s = {.ndim = sample.ndim + 1};
  s.d[0] = n;
  for (int i = 0; i < sample.ndim && i + 1 < CT_MAX_DIMS; ++i) s.d[i + 1] = sample.d[i];
  return s;
}

static int check_out(const ct_dataset *ds, const char *which, const ct_tensor *t, int64_t n,
                     ct_shape sample, ct_dtype dt) {
  char a[160], b[160], d[CT_DEVICE_STR_MAX];
  if (!t) return ct_fail(CT_ERR_VALUE, "ct_dataset_get_batch: NULL %s tensor", which);
  if (ct_device_of(t).type != CT_CPU)
    return ct_fail(CT_ERR_DEVICE, "ct_dataset_get_batch: %s must be a CPU tensor, got one on %s",
                   which, ct_device_str(ct_device_of(t), d));
  if (ct_dtype_of(t) != dt)
    return ct_fail(CT_ERR_DTYPE, "ct_dataset_get_batch: %s of %s has dtype %s, expected %s", which,
                   ds->name, ct_dtype_name(ct_dtype_of(t)), ct_dtype_name(dt));
  ct_shape want = batch_shape(n, sample);
  if (!ct_shape_eq(ct_shape_of(t), want))
    return ct_fail(CT_ERR_SHAPE, "ct_dataset_get_batch: %s has shape %s, expected %s", which,
                   ct_shape_str(ct_shape_of(t), a, sizeof a), ct_shape_str(want, b, sizeof b));
  if (!ct_is_contiguous(t))
    return ct_fail(CT_ERR_VALUE, "ct_dataset_get_batch: %s must be contiguous", which);
  return CT_OK;
}

int ct_dataset_get_batch(const ct_dataset *ds, const int64_t *idx, int64_t n, ct_tensor *x,
                         ct_tensor *y) {
  if (!ds) return ct_fail(CT_ERR_VALUE, "ct_dataset_get_batch: NULL dataset");
  if (n < 0) return ct_fail(CT_ERR_VALUE, "ct_dataset_get_batch: negative count %" PRId64, n);
  if (n > 0 && !idx) return ct_fail(CT_ERR_VALUE, "ct_dataset_get_batch: NULL index list");
  int rc = check_out(ds, "x", x, n, ds->x_shape, ds->x_dtype);
  if (rc == CT_OK) rc = check_out(ds, "y", y, n, ds->y_shape, ds->y_dtype);
  if (rc != CT_OK) return rc;
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= ds->len)
      return ct_fail(CT_ERR_VALUE,
                     "ct_dataset_get_batch: index %" PRId64 " (position %" PRId64
                     ") is out of range for %s of length %" PRId64,
                     idx[i], i, ds->name, ds->len);
  return ds->ops->get_batch(ds, idx, n, x, y);
}

void ct_dataset_free(ct_dataset *ds) {
  if (!ds) return;
  ds->ops->destroy(ds);
  free(ds);
}

// ---- TensorDataset -----------------------------------------------------------------
static void gather_rows(const ct_tensor *src, const int64_t *idx, int64_t n, ct_tensor *dst) {
  // src is (len, ...) contiguous: row i is `row` bytes at i * row.
  size_t row = ct_nbytes(src) / (size_t)(ct_size(src, 0) ? ct_size(src, 0) : 1);
  const char *s = ct_data_ptr(src);
  char *d = ct_data_ptr(dst);
  for (int64_t i = 0; i < n; ++i) memcpy(d + (size_t)i * row, s + (size_t)idx[i] * row, row);
}

static int tensor_get_batch(const ct_dataset *ds, const int64_t *idx, int64_t n, ct_tensor *x,
                            ct_tensor *y) {
  gather_rows(ds->x, idx, n, x);
  gather_rows(ds->y, idx, n, y);
  return CT_OK;
}

static void tensor_destroy(ct_dataset *ds) {
  ct_free(ds->x);
  ct_free(ds->y);
}

static const dataset_ops tensor_ops = {tensor_get_batch, tensor_destroy};

static ct_shape sample_shape(const ct_tensor *t) {
  ct_shape s = ct_shape_of(t), r = {.ndim = s.ndim - 1};
  for (int i = 1; i < s.ndim; ++i) r.d[i - 1] = s.d[i];
  return r;
}

static ct_dataset *tensor_dataset(const char *op, const char *name, ct_tensor *x, ct_tensor *y) {
  char a[160], b[160], d[CT_DEVICE_STR_MAX];
  if (!x || !y) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", op);
    return NULL;
  }
  const ct_tensor *ts[2] = {x, y};
  for (int k = 0; k < 2; ++k) {
    if (ct_device_of(ts[k]).type != CT_CPU) {
      ct_fail(CT_ERR_DEVICE, "%s: %s must be a CPU tensor, got one on %s", op, k ? "y" : "x",
              ct_device_str(ct_device_of(ts[k]), d));
      return NULL;
    }
    if (ct_ndim(ts[k]) < 1) {
      ct_fail(CT_ERR_SHAPE, "%s: %s must have a sample dim, got a 0-d tensor", op, k ? "y" : "x");
      return NULL;
    }
  }
  if (ct_size(x, 0) != ct_size(y, 0)) {
    ct_fail(CT_ERR_SHAPE, "%s: size mismatch between tensors: x %s and y %s differ in dim 0", op,
            ct_shape_str(ct_shape_of(x), a, sizeof a), ct_shape_str(ct_shape_of(y), b, sizeof b));
    return NULL;
  }
  ct_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    ct_fail(CT_ERR_OOM, "%s: out of host memory", op);
    return NULL;
  }
  // Contiguous is what get_batch copies rows from: a new reference to x when
  // it already is (so the dataset sees later in-place changes, as PyTorch's
  // does), else a contiguous copy.
  ds->x = ct_contiguous(x);
  ds->y = ds->x ? ct_contiguous(y) : NULL;
  if (!ds->x || !ds->y) {
    ct_free(ds->x);
    free(ds);
    return NULL;
  }
  ds->ops = &tensor_ops;
  ds->name = name;
  ds->len = ct_size(x, 0);
  ds->x_shape = sample_shape(x);
  ds->y_shape = sample_shape(y);
  ds->x_dtype = ct_dtype_of(x);
  ds->y_dtype = ct_dtype_of(y);
  return ds;
}

ct_dataset *ct_tensor_dataset(ct_tensor *x, ct_tensor *y) {
  return tensor_dataset("ct_tensor_dataset", "TensorDataset", x, y);
}

ct_dataset *ct_random_dataset(int64_t size, int64_t length) {
  if (size < 0 || length < 0) {
    ct_fail(CT_ERR_VALUE, "ct_random_dataset: size and length must be >= 0, got %" PRId64
            " and %" PRId64, size, length);
    return NULL;
  }
  ct_tensor *x = ct_randn(CT_SHAPE(length, size), CT_F32, ct_device_cpu());
  ct_tensor *y = x ? ct_zeros(CT_SHAPE(length), CT_I64, ct_device_cpu()) : NULL;
  ct_dataset *ds = y ? tensor_dataset("ct_random_dataset", "RandomDataset", x, y) : NULL;
  ct_free(x);
  ct_free(y);
  return ds;
}

// ---- Fashion-MNIST -----------------------------------------------------------------
static const char *const fashion_classes[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot",
};

const char *ct_fashion_mnist_class_name(int label) {
  return label >= 0 && label < 10 ? fashion_classes[label] : "?";
}

static int fashion_get_batch(const ct_dataset *ds, const int64_t *idx, int64_t n, ct_tensor *x,
                             ct_tensor *y) {
  enum { P = 28 * 28 };
  float *xo = ct_data_ptr(x);  // x is (n, 1, 28, 28) float32
  int64_t *yo = ct_data_ptr(y); // y is (n) int64
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t *src = ds->pixels + (size_t)idx[i] * P;
    float *dst = xo + (size_t)i * P;
    for (int p = 0; p < P; ++p) dst[p] = ds->lut[src[p]];
    yo[i] = ds->labels[idx[i]];
  }
  return CT_OK;
}

static void fashion_destroy(ct_dataset *ds) {
  ct_free(ds->x);
  ct_free(ds->y);
}

static const dataset_ops fashion_ops = {fashion_get_batch, fashion_destroy};

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// Finds `base`.gz, else `base` uncompressed, in dir; writes the path chosen
// (the .gz one when neither exists, for the message) into out.
static int find_file(const char *dir, const char *base, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s.gz", dir, base); // the longest spelling: nothing is ever cut short
  if (n < 0 || (size_t)n >= len)
    return ct_fail(CT_ERR_VALUE, "ct_fashion_mnist: %s: the path %s/%s.gz is %d bytes, more than the %zu this "
                   "program takes; use a shorter folder", dir, dir, base, n, len - 1);
  snprintf(out, len, "%s/%s", dir, base);
  if (is_file(out)) {
    char gz[4096];
    snprintf(gz, sizeof gz, "%s.gz", out);
    if (is_file(gz)) snprintf(out, len, "%s", gz);
    return CT_OK;
  }
  snprintf(out, len, "%s/%s.gz", dir, base);
  return CT_OK;
}

// Reads one IDX file that must be u8 with `ndim` dims, `tail` the dims after
// the first (28, 28 for images); returns the tensor and its first dim.
static ct_tensor *read_u8(const char *path, int ndim, const int64_t *tail, int64_t *count) {
  ct_tensor *t = ct_idx_read(path);
  if (!t) {
    // Keep the reader's reason; say what to do about it.
    char why[2048];
    snprintf(why, sizeof why, "%s", ct_last_error());
    const char *p = strstr(why, path);
    const char *reason = p ? p + strlen(path) : why; // ": No such file or directory"
    if (strncmp(reason, ": ", 2) == 0) reason += 2;
    if (!is_file(path))
      ct_fail(CT_ERR_IO,
              "ct_fashion_mnist: %s: %s. Install Debian's dataset-fashion-mnist (tools/bootstrap "
              "does) or pass --data DIR",
              path, reason);
    else
      ct_fail(CT_ERR_IO,
              "ct_fashion_mnist: %s: %s. Reinstall Debian's dataset-fashion-mnist (apt-get "
              "install --reinstall dataset-fashion-mnist) or pass --data DIR",
              path, reason);
    return NULL;
  }
  bool ok = ct_dtype_of(t) == CT_U8 && ct_ndim(t) == ndim;
  for (int i = 1; ok && i < ndim; ++i) ok = ct_size(t, i) == tail[i - 1];
  if (!ok) {
    char s[160];
    ct_fail(CT_ERR_IO,
            "ct_fashion_mnist: %s: expected u8 %s, got %s of shape %s. Reinstall Debian's "
            "dataset-fashion-mnist or pass --data DIR",
            path, ndim == 3 ? "images (N, 28, 28)" : "labels (N)", ct_dtype_name(ct_dtype_of(t)),
            ct_shape_str(ct_shape_of(t), s, sizeof s));
    ct_free(t);
    return NULL;
  }
  *count = ct_size(t, 0);
  return t;
}

ct_dataset *ct_fashion_mnist(const char *dir, bool train, double mean, double std) {
  if (!dir || !*dir) dir = getenv("CT_FASHION_MNIST_DIR");
  if (!dir || !*dir) dir = "/usr/share/datasets/fashion-mnist";
  if (!(std >= 0)) {
    ct_fail(CT_ERR_VALUE, "ct_fashion_mnist: std must be >= 0 (0: no normalization), got %g", std);
    return NULL;
  }
  const char *prefix = train ? "train" : "t10k";
  char ipath[4096], lpath[4096], base[64];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
  if (find_file(dir, base, ipath, sizeof ipath) != CT_OK) return NULL;
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
  if (find_file(dir, base, lpath, sizeof lpath) != CT_OK) return NULL;

  const int64_t hw[2] = {28, 28};
  int64_t ni = 0, nl = 0;
  ct_tensor *pix = read_u8(ipath, 3, hw, &ni);
  if (!pix) return NULL;
  ct_tensor *lab = read_u8(lpath, 1, NULL, &nl);
  if (!lab) {
    ct_free(pix);
    return NULL;
  }
  const uint8_t *labels = ct_data_ptr(lab);
  if (ni != nl) {
    ct_fail(CT_ERR_IO, "ct_fashion_mnist: %s has %" PRId64 " images but %s has %" PRId64
            " labels. Reinstall Debian's dataset-fashion-mnist or pass --data DIR",
            ipath, ni, lpath, nl);
    goto fail;
  }
  for (int64_t i = 0; i < nl; ++i)
    if (labels[i] > 9) {
      ct_fail(CT_ERR_IO, "ct_fashion_mnist: %s: label %d at index %" PRId64
              " is not a class (0..9). Reinstall Debian's dataset-fashion-mnist or pass --data DIR",
              lpath, labels[i], i);
      goto fail;
    }
  ct_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    ct_fail(CT_ERR_OOM, "ct_fashion_mnist: out of host memory");
    goto fail;
  }
  ds->ops = &fashion_ops;
  ds->name = train ? "FashionMNIST(train)" : "FashionMNIST(test)";
  ds->len = ni;
  ds->x_shape = CT_SHAPE(1, 28, 28);
  ds->y_shape = CT_SCALAR_SHAPE;
  ds->x_dtype = CT_F32;
  ds->y_dtype = CT_I64;
  ds->x = pix;
  ds->y = lab;
  ds->pixels = ct_data_ptr(pix);
  ds->labels = labels;
  // torchvision: ToTensor is img.float().div(255); Normalize is
  // sub_(mean).div_(std), all in float32.
  float m = (float)mean, s = (float)std;
  for (int p = 0; p < 256; ++p) {
    float v = (float)p / 255.0f;
    ds->lut[p] = std > 0 ? (v - m) / s : v;
  }
  return ds;
fail:
  ct_free(pix);
  ct_free(lab);
  return NULL;
}
