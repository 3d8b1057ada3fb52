// wrong: does not log the tries in tried[]
  while (batch >= 1 && *n_tried < 64) {
    int rc = try_batch(c, batch);
    if (rc == CT_OK) return batch;
    if (rc != CT_ERR_OOM) return 0;
    if (ct_empty_cache(c->d) != CT_OK) return 0;
    batch /= 2;
  }
