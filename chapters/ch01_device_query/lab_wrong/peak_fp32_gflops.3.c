// wrong: the lanes of one SM only (forgets the SM count)
  double clock_hz = sm_clock_khz * 1e3;
  return lanes_per_sm * 2.0 * clock_hz / 1e9;
