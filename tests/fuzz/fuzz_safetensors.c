// SPDX-License-Identifier: MIT
// fuzz_safetensors: ct_load_safetensors on arbitrary bytes: a clean load or a
// message, never a crash, an out-of-bounds read or a leak.
#include "ct.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ct_named_tensor *e = NULL;
  int n = 0;
  int rc = ct_load_safetensors(fuzz_file(".safetensors", data, size), ct_device_cpu(), &e, &n);
  if (rc == CT_OK) {
    for (int i = 0; i < n; ++i)
      if (!e[i].tensor) abort();
    ct_named_tensors_free(e, n);
  } else if (!ct_last_error()[0] || e) {
    abort();
  }
  ct_clear_error();
  return 0;
}
