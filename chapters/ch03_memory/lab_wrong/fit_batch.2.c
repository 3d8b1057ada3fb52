// wrong: halves before the first try (never tries the starting batch)
  while (batch >= 1 && *n_tried < 64) {
    batch /= 2;
    tried[(*n_tried)++] = (double)batch;
    int rc = try_batch(c, batch);
    if (rc == CT_OK) return batch;
    if (rc != CT_ERR_OOM) return 0;
    if (ct_empty_cache(c->d) != CT_OK) return 0;
  }
