// wrong: forgets DDR's two transfers per clock
  double transfers_per_second = memory_clock_khz * 1e3;
  double bytes_per_transfer = bus_width_bits / 8.0;
  return transfers_per_second * bytes_per_transfer / 1e9;
