// wrong: off by one level, strict < at the boundary and the levels tested largest first
  double ws = 2 * bytes;
  if (l3 > 0 && ws < l3) return "L3";
  if (l2 > 0 && ws < l2) return "L2";
  if (l1 > 0 && ws < l1) return "L1";
  return "DRAM";
