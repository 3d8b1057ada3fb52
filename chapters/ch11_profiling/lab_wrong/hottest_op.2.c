// wrong: the comparison the wrong way round (the coolest op)
  const ct_profiler_row *best = NULL;
  for (int i = 0; i < a->n; ++i) {
    const ct_profiler_row *r = &a->rows[i];
    if (strncmp(r->name, "ct::", 4) != 0) continue;
    if (!best || self_time(r, device) < self_time(best, device)) best = r;
  }
  return best;
