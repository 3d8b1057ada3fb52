// wrong: the clock in kHz taken as MHz (x 1e6)
  double lanes = (double)sms * lanes_per_sm;
  double clock_hz = sm_clock_khz * 1e6;
  return lanes * 2.0 * clock_hz / 1e9;
