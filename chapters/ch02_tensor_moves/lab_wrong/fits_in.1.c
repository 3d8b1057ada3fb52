// wrong: the working set taken as bytes (forgets the destination)
  double ws = bytes;
  if (l1 > 0 && ws <= l1) return "L1";
  if (l2 > 0 && ws <= l2) return "L2";
  if (l3 > 0 && ws <= l3) return "L3";
  return "DRAM";
