// wrong: an inf does not reset the count of clean steps
  if (found_inf) {
    *scale = (float)(*scale * o->backoff_factor);
    return;
  }
  if (*tracker + 1 == o->growth_interval) {
    const float grown = (float)(*scale * o->growth_factor);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker += 1;
  }
