// wrong: the bus width taken as bytes (no / 8)
  double transfers_per_second = 2.0 * memory_clock_khz * 1e3;
  return transfers_per_second * bus_width_bits / 1e9;
