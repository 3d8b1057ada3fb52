// wrong: backs off by dividing by backoff_factor (the scale grows on an inf)
  if (found_inf) {
    *scale = (float)(*scale / o->backoff_factor);
    *tracker = 0;
    return;
  }
  if (*tracker + 1 == o->growth_interval) {
    const float grown = (float)(*scale * o->growth_factor);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker += 1;
  }
