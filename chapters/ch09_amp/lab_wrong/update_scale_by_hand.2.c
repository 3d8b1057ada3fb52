// wrong: off by one, grows after growth_interval + 1 clean steps
  if (found_inf) {
    *scale = (float)(*scale * o->backoff_factor);
    *tracker = 0;
    return;
  }
  if (*tracker == o->growth_interval) {
    const float grown = (float)(*scale * o->growth_factor);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker += 1;
  }
