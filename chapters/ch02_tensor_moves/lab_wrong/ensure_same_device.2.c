// wrong: copies every tensor, even those already on the device (and counts them)
  if (n <= 0) return 0;
  ct_device target = ct_device_of(ts[0]);
  int moved = 0;
  for (int i = 1; i < n; ++i) {
    ct_tensor *t = ct_to_device(ts[i], target);
    if (!t) return -1;
    ct_free(ts[i]);
    ts[i] = t;
    moved++;
  }
  return moved;
