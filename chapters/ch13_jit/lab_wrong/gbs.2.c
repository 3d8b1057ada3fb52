// wrong: GiB/s (2^30) instead of GB/s (1e9)
  return (double)bytes / (ms * 1e-3) / (1024.0 * 1024.0 * 1024.0);
