// wrong: GiB/s (2^30) instead of GB/s (1e9)
  double transfers_per_second = 2.0 * memory_clock_khz * 1e3;
  double bytes_per_transfer = bus_width_bits / 8.0;
  return transfers_per_second * bytes_per_transfer / (1024.0 * 1024.0 * 1024.0);
