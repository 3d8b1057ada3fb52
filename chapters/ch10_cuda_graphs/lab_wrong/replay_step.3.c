// wrong: replays before copying the batch in (each replay trains on the previous batch)
  int rc = ct_cuda_graph_replay(gr->g);
  if (rc == CT_OK) rc = ct_copy_(gr->static_x, d->x[i % NBATCH], false);
  if (rc == CT_OK) rc = ct_copy_(gr->static_y, d->y[i % NBATCH], false);
  return rc;
