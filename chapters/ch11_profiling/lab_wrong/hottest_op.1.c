// wrong: every row counts, the user ranges and modules too (no "ct::" filter)
  const ct_profiler_row *best = NULL;
  for (int i = 0; i < a->n; ++i) {
    const ct_profiler_row *r = &a->rows[i];
    if (!best || self_time(r, device) > self_time(best, device)) best = r;
  }
  return best;
