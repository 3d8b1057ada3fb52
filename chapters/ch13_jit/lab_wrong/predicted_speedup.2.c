// wrong: integer division (the fraction is lost)
  return (double)(unfused.bytes / fused.bytes);
