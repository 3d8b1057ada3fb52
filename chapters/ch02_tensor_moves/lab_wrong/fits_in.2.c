// wrong: L3 tested before L2 (a copy that fits in L2 is reported as L3)
  double ws = 2 * bytes;
  if (l1 > 0 && ws <= l1) return "L1";
  if (l3 > 0 && ws <= l3) return "L3";
  if (l2 > 0 && ws <= l2) return "L2";
  return "DRAM";
