// wrong: milliseconds taken as seconds (no 1e-3)
  return (double)bytes / ms / 1e9;
