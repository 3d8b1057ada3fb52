// wrong: off by one: batch (i + 1) % NBATCH
  int rc = ct_copy_(gr->static_x, d->x[(i + 1) % NBATCH], false); // static_input.copy_(real_input)
  if (rc == CT_OK) rc = ct_copy_(gr->static_y, d->y[i % NBATCH], false);
  if (rc == CT_OK) rc = ct_cuda_graph_replay(gr->g); // g.replay()
  return rc;
