// wrong: the ratio upside down (fused / unfused)
  return (double)fused.bytes / (double)unfused.bytes;
