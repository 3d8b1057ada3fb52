// SPDX-License-Identifier: MIT
// fuzz_idx: ct_idx_read on arbitrary bytes, plain and gzip-framed. It may
// accept or refuse (with a message); it must not crash, read out of bounds or
// leak (ASan/UBSan/LeakSanitizer are on).
#include "ct.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ct_tensor *t = ct_idx_read(fuzz_file(".idx", data, size));
  if (t) {
    if (ct_numel(t) > 0 && !ct_data_ptr(t)) abort();
    ct_free(t);
  } else if (!ct_last_error()[0]) {
    abort(); // a refusal must say why
  }
  ct_clear_error();
  return 0;
}
