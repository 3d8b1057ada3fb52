// SPDX-License-Identifier: MIT
// fuzz_device: ct_device_parse on arbitrary text. Accepted text must print
// back as a device the parser accepts again, the same device.
#include <stdlib.h>
#include <string.h>

#include "ct.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char s[64];
  if (size >= sizeof s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  ct_device d;
  if (ct_device_parse(s, &d) == CT_OK) {
    char buf[CT_DEVICE_STR_MAX];
    ct_device again;
    if (ct_device_parse(ct_device_str(d, buf), &again) != CT_OK || !ct_device_eq(d, again)) abort();
  } else if (!ct_last_error()[0]) {
    abort();
  }
  ct_clear_error();
  return 0;
}
