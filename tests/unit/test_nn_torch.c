// SPDX-License-Identifier: MIT
//
// test_nn_torch: torch.nn's own forward and backward, replayed on the device
// under test.
//
// tools/fixtures/nn.py stores, per case, the weights (under their state_dict
// names), an input, a grad_output G, and what PyTorch computed: the output,
// d(out * G).sum()/d input and every parameter's .grad (for the losses: the
// loss and its gradient). This test builds the same ct_ model, loads the
// weights with ct_module_load_state, runs forward and backward and compares.
//
// Invariant checked: every value is within 1e-5 relative (plus 1e-6
// absolute, for values near zero) of PyTorch's float32 result.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

#define RTOL 1e-5
#define ATOL 1e-6

typedef struct fixture {
  ct_named_tensor *e;
  int n;
} fixture;

static fixture load(const char *name) {
  const char *dir = getenv("CT_FIXTURE_DIR");
  if (!dir) fail_msg("CT_FIXTURE_DIR is not set (ctest sets it to tests/fixtures)");
  char path[1024];
  snprintf(path, sizeof path, "%s/nn/%s.safetensors", dir, name);
  fixture f = {0};
  TU_OK(ct_load_safetensors(path, tu_device, &f.e, &f.n));
  return f;
}

static ct_tensor *get(const fixture *f, const char *name) {
  for (int i = 0; i < f->n; ++i)
    if (!strcmp(f->e[i].name, name)) return f->e[i].tensor;
  fail_msg("fixture has no tensor \"%s\"", name);
  return NULL;
}

static void assert_like(const ct_tensor *got, const ct_tensor *want, const char *what) {
  TU_CHECK(got);
  ref_assert_shape(got, ct_shape_of(want), what);
  ref_assert_dtype(got, ct_dtype_of(want), what);
  double *w = tu_to_f64(want);
  TU_CHECK(w);
  tu_assert_close(got, w, RTOL, ATOL, what);
  free(w);
}

// Builds nothing: takes `m`, loads the case's weights, replays and compares.
static void replay_module(const char *name, ct_module *m, bool train) {
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  ct_module_train(m, train);
  fixture f = load(name);
  // every state entry must be in the file (the other tensors are the case's data)
  int ns = 0;
  ct_param **s = ct_module_state(m, &ns);
  for (int i = 0; i < ns; ++i) (void)get(&f, s[i]->name);
  TU_OK(ct_module_load_state(m, f.e, f.n, false));
  char what[256];
  ct_tensor *y = ct_module_forward(m, get(&f, "input"));
  snprintf(what, sizeof what, "%s output", name);
  assert_like(y, get(&f, "output"), what);
  if (train) {
    ct_tensor *dx = ct_module_backward(m, get(&f, "grad_output"));
    snprintf(what, sizeof what, "%s grad_input", name);
    assert_like(dx, get(&f, "grad_input"), what);
    ct_free(dx);
    int np = 0;
    ct_param **p = ct_module_parameters(m, &np);
    for (int i = 0; i < np; ++i) {
      char key[128];
      snprintf(key, sizeof key, "grad.%s", p[i]->name);
      snprintf(what, sizeof what, "%s %s", name, key);
      assert_like(p[i]->grad, get(&f, key), what);
    }
  } else {
    // eval: torch's backward of the identity is grad_output itself
    snprintf(what, sizeof what, "%s grad_input", name);
    assert_like(get(&f, "grad_output"), get(&f, "grad_input"), what);
  }
  ct_free(y);
  ct_named_tensors_free(f.e, f.n);
  ct_module_free(m);
}

static void test_linear(void **state) {
  (void)state;
  replay_module("linear", ct_nn_linear(5, 4, true), true);
  replay_module("linear_nobias", ct_nn_linear(7, 3, false), true);
  replay_module("linear_3d", ct_nn_linear(3, 2, true), true);
}

static void test_activations(void **state) {
  (void)state;
  replay_module("relu", ct_nn_relu(), true);
  replay_module("flatten", ct_nn_flatten(), true);
  replay_module("dropout_p0", ct_nn_dropout(0.0), true);
  replay_module("dropout_eval", ct_nn_dropout(0.5), false);
}

static void test_sequential(void **state) {
  (void)state;
  replay_module("sequential",
                ct_nn_sequential(3, (ct_module *[]){ct_nn_linear(8, 6, true), ct_nn_relu(), ct_nn_linear(6, 3, true)}),
                true);
}

static void test_losses(void **state) {
  (void)state;
  const char *names[] = {"mse", "cross_entropy"};
  for (int k = 0; k < 2; ++k) {
    fixture f = load(names[k]);
    ct_tensor *grad = NULL;
    ct_tensor *loss = k == 0 ? ct_mse_loss(get(&f, "input"), get(&f, "target"), &grad)
                             : ct_cross_entropy_loss(get(&f, "input"), get(&f, "target"), &grad);
    char what[64];
    snprintf(what, sizeof what, "%s loss", names[k]);
    assert_like(loss, get(&f, "output"), what);
    snprintf(what, sizeof what, "%s grad_input", names[k]);
    assert_like(grad, get(&f, "grad_input"), what);
    ct_free(loss), ct_free(grad);
    ct_named_tensors_free(f.e, f.n);
  }
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_sequential),
      cmocka_unit_test(test_losses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
