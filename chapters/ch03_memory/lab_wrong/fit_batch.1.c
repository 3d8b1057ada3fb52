// wrong: returns 0 on the first out-of-memory instead of halving and trying again
  while (batch >= 1 && *n_tried < 64) {
    tried[(*n_tried)++] = (double)batch;
    int rc = try_batch(c, batch);
    if (rc == CT_OK) return batch;
    return 0;
  }
