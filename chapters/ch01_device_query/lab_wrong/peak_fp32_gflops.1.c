// wrong: counts an FMA as one operation (no x 2)
  double lanes = (double)sms * lanes_per_sm;
  double clock_hz = sm_clock_khz * 1e3;
  return lanes * clock_hz / 1e9;
