// SPDX-License-Identifier: MIT
//
// st_roundtrip: the C half of the PyTorch checkpoint round trip
// (tests/extra/check_st_torch.py drives it).
//
//   st_roundtrip write DIR [DEVICE]
//     DIR/c_dtypes.safetensors  one tensor per dtype and several shapes,
//                               values from the recipe below, + metadata
//     DIR/c_model.safetensors   ct_module_save of a seeded
//                               Sequential(Linear(4, 6), ReLU, Linear(6, 2))
//     DIR/c_io.safetensors      {"x": input (3, 4), "y": the model's output}
//   st_roundtrip read DIR [DEVICE]
//     DIR/py_dtypes.safetensors the same recipe, written by st.py from torch
//     DIR/py_model.safetensors  a torch Sequential(Linear(5, 7), ReLU,
//                               Linear(7, 3)) state_dict, loaded here with
//                               ct_module_load ...
//     DIR/py_io.safetensors     ... and run on torch's x: must give torch's y
//
// The recipe (element i of the flattened tensor; the Python side recomputes
// it with numpy, never reading the C program's numbers):
//   f64   (2, 3)     i / 3 - 0.5
//   f32   (4,)       i * 0.25 - 1
//   f16   (2, 2, 2)  i * 0.5 - 2
//   bf16  (3,)       i * 1.5 - 2
//   i64   (5,)       i * 10^12 - 7
//   i32   (2, 3)     3 - 1000 i
//   u8    (6,)       50 i
//   bool  (7,)       i % 3 == 0
//   scalar ()  f32   3.25
//   empty  (0, 4) f32
//   big   (64, 33) f32  (i % 97) * 0.125
// Exit status: 0 passed, 1 a check failed, 77 the device is unavailable.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct.h"

typedef struct recipe {
  const char *name;
  ct_dtype dt;
  ct_shape shape;
} recipe;

#define N_RECIPE 11
static const recipe R[N_RECIPE] = {
    {"f64", CT_F64, CT_SHAPE(2, 3)},  {"f32", CT_F32, CT_SHAPE(4)},   {"f16", CT_F16, CT_SHAPE(2, 2, 2)},
    {"bf16", CT_BF16, CT_SHAPE(3)},   {"i64", CT_I64, CT_SHAPE(5)},   {"i32", CT_I32, CT_SHAPE(2, 3)},
    {"u8", CT_U8, CT_SHAPE(6)},       {"bool", CT_BOOL, CT_SHAPE(7)}, {"scalar", CT_F32, CT_SCALAR_SHAPE},
    {"empty", CT_F32, CT_SHAPE(0, 4)}, {"big", CT_F32, CT_SHAPE(64, 33)},
};

static double value(const char *name, int64_t i) {
  double x = (double)i;
  if (!strcmp(name, "f64")) return x / 3 - 0.5;
  if (!strcmp(name, "f32")) return x * 0.25 - 1;
  if (!strcmp(name, "f16")) return x * 0.5 - 2;
  if (!strcmp(name, "bf16")) return x * 1.5 - 2;
  if (!strcmp(name, "i64")) return x * 1e12 - 7;
  if (!strcmp(name, "i32")) return 3 - 1000 * x;
  if (!strcmp(name, "u8")) return 50 * x;
  if (!strcmp(name, "bool")) return i % 3 == 0;
  if (!strcmp(name, "scalar")) return 3.25;
  if (!strcmp(name, "big")) return (double)(i % 97) * 0.125;
  return 0;
}

// The recipe's tensor on the host, elements stored through ct_store_f64
// (exact: every value is representable in its dtype).
static ct_tensor *make(const recipe *r) {
  int64_t n = ct_shape_numel(r->shape);
  unsigned char *buf = malloc((size_t)(n ? n : 1) * ct_dtype_size(r->dt));
  for (int64_t i = 0; i < n; i++) ct_store_f64(buf + i * (int64_t)ct_dtype_size(r->dt), r->dt, value(r->name, i));
  ct_tensor *t = ct_from_host(buf, r->shape, r->dt, ct_device_cpu());
  free(buf);
  return t;
}

static int fails;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "st_roundtrip: FAILED: " __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                                                       \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static _Noreturn void die(const char *what) {
  fprintf(stderr, "st_roundtrip: %s: %s\n", what, ct_last_error());
  exit(1);
}

static char *join(const char *dir, const char *name) {
  static char buf[4][1024];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static ct_module *mlp(int64_t in, int64_t hidden, int64_t out) {
  ct_module *layers[3] = {ct_nn_linear(in, hidden, true), ct_nn_relu(), ct_nn_linear(hidden, out, true)};
  for (int i = 0; i < 3; i++)
    if (!layers[i]) die("building the model");
  ct_module *m = ct_nn_sequential(3, layers);
  if (!m) die("ct_nn_sequential");
  return m;
}

static double *host_f64(const ct_tensor *t) {
  ct_tensor *c = ct_to(t, ct_device_cpu(), CT_F64, false);
  if (!c) die("ct_to");
  int64_t n = ct_numel(c);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (ct_copy_to_host(c, v, sizeof(double) * (size_t)(n ? n : 1)) != CT_OK) die("ct_copy_to_host");
  ct_free(c);
  return v;
}

static int do_write(const char *dir, ct_device dev) {
  ct_named_tensor es[N_RECIPE];
  for (int i = 0; i < N_RECIPE; i++) {
    ct_tensor *h = make(&R[i]);
    if (!h) die(R[i].name);
    es[i].tensor = ct_to_device(h, dev); // saved from the device under test
    ct_free(h);
    if (!es[i].tensor) die("ct_to_device");
    snprintf(es[i].name, sizeof es[i].name, "%s", R[i].name);
  }
  const char *meta[] = {"producer", "ct st_roundtrip", "quoted", "a \"b\" \\ c\n\xc3\xa9", NULL};
  if (ct_save_safetensors(join(dir, "c_dtypes.safetensors"), es, N_RECIPE, meta) != CT_OK) die("save dtypes");
  for (int i = 0; i < N_RECIPE; i++) ct_free(es[i].tensor);

  ct_manual_seed(1234);
  ct_module *m = mlp(4, 6, 2);
  if (ct_module_to(m, dev) != CT_OK) die("ct_module_to");
  ct_module_train(m, false);
  if (ct_module_save(m, join(dir, "c_model.safetensors")) != CT_OK) die("ct_module_save");
  // x (3, 4): (i - 5) / 4, so some hidden units are negative and ReLU matters.
  float xs[12];
  for (int i = 0; i < 12; i++) xs[i] = (float)(i - 5) / 4.0f;
  ct_tensor *x = ct_from_host(xs, CT_SHAPE(3, 4), CT_F32, dev);
  ct_tensor *y = x ? ct_module_forward(m, x) : NULL;
  if (!y) die("forward");
  ct_named_tensor io[2] = {{"x", x}, {"y", y}};
  if (ct_save_safetensors(join(dir, "c_io.safetensors"), io, 2, NULL) != CT_OK) die("save io");
  ct_free(x);
  ct_free(y);
  ct_module_free(m);
  printf("st_roundtrip: wrote c_dtypes, c_model, c_io in %s\n", dir);
  return 0;
}

static int do_read(const char *dir, ct_device dev) {
  // Every dtype, as torch wrote it, against the recipe.
  ct_named_tensor *es;
  int n;
  if (ct_load_safetensors(join(dir, "py_dtypes.safetensors"), dev, &es, &n) != CT_OK) die("load py_dtypes");
  CHECK(n == N_RECIPE, "py_dtypes holds %d tensors, expected %d", n, N_RECIPE);
  for (int r = 0; r < N_RECIPE; r++) {
    int k = -1;
    for (int i = 0; i < n; i++)
      if (!strcmp(es[i].name, R[r].name)) k = i;
    CHECK(k >= 0, "py_dtypes lacks \"%s\"", R[r].name);
    if (k < 0) continue;
    const ct_tensor *t = es[k].tensor;
    CHECK(ct_dtype_of(t) == R[r].dt, "%s: dtype %s", R[r].name, ct_dtype_name(ct_dtype_of(t)));
    CHECK(ct_shape_eq(ct_shape_of(t), R[r].shape), "%s: shape differs", R[r].name);
    CHECK(ct_device_of(t).type == dev.type, "%s: not on the requested device", R[r].name);
    if (ct_dtype_of(t) != R[r].dt || !ct_shape_eq(ct_shape_of(t), R[r].shape)) continue;
    double *v = host_f64(t);
    for (int64_t i = 0; i < ct_numel(t); i++)
      CHECK(v[i] == value(R[r].name, i), "%s[%lld] = %.17g, expected %.17g", R[r].name, (long long)i, v[i],
            value(R[r].name, i));
    free(v);
  }
  ct_named_tensors_free(es, n);

  // torch's model and its output on torch's input.
  ct_module *m = mlp(5, 7, 3);
  if (ct_module_to(m, dev) != CT_OK) die("ct_module_to");
  if (ct_module_load(m, join(dir, "py_model.safetensors")) != CT_OK) die("ct_module_load py_model");
  ct_module_train(m, false);
  if (ct_load_safetensors(join(dir, "py_io.safetensors"), dev, &es, &n) != CT_OK) die("load py_io");
  CHECK(n == 2 && !strcmp(es[0].name, "x") && !strcmp(es[1].name, "y"), "py_io holds x, y");
  ct_tensor *y = ct_module_forward(m, es[0].tensor);
  if (!y) die("forward");
  CHECK(ct_shape_eq(ct_shape_of(y), ct_shape_of(es[1].tensor)), "output shape differs");
  double *got = host_f64(y), *want = host_f64(es[1].tensor), worst = 0;
  for (int64_t i = 0; i < ct_numel(y); i++) {
    double err = fabs(got[i] - want[i]) / (fabs(want[i]) + 1e-3);
    if (err > worst) worst = err;
    CHECK(fabs(got[i] - want[i]) <= 1e-5 * fabs(want[i]) + 1e-6, "y[%lld] = %.9g, torch says %.9g", (long long)i,
          got[i], want[i]);
  }
  printf("st_roundtrip: torch's model loaded with ct_module_load; forward vs torch: max rel err %.2e\n", worst);
  free(got);
  free(want);
  ct_free(y);
  ct_named_tensors_free(es, n);
  ct_module_free(m);
  return fails ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 || (strcmp(argv[1], "write") && strcmp(argv[1], "read"))) {
    fprintf(stderr, "usage: %s write|read DIR [DEVICE]\n", argv[0]);
    return 2;
  }
  ct_device dev = ct_device_cpu();
  if (argc == 4) {
    if (!strncmp(argv[3], "cuda", 4) && !ct_cuda_is_available()) {
      printf("skipped: CUDA unavailable: %s\n", ct_cuda_unavailable_reason());
      return 77;
    }
    if (ct_device_parse(argv[3], &dev) != CT_OK) die("--device");
  }
  int rc = !strcmp(argv[1], "write") ? do_write(argv[2], dev) : do_read(argv[2], dev);
  if (fails) fprintf(stderr, "st_roundtrip: %d check(s) failed\n", fails);
  return rc || fails ? 1 : 0;
}
