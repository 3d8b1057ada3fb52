// wrong: off by one, the loop starts at ts[0] and skips the last tensor
  if (n <= 0) return 0;
  ct_device target = ct_device_of(ts[0]);
  int moved = 0;
  for (int i = 0; i < n - 1; ++i) {
    if (ct_device_eq(ct_device_of(ts[i]), target)) continue;
    ct_tensor *t = ct_to_device(ts[i], target);
    if (!t) return -1;
    ct_free(ts[i]);
    ts[i] = t;
    moved++;
  }
  return moved;
