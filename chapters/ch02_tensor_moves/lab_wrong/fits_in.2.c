// wrong: an unknown level (size 0) is not skipped
  double ws = 2 * bytes;
  if (ws <= l1) return "L1";
  if (ws <= l2) return "L2";
  if (ws <= l3) return "L3";
  return "DRAM";
