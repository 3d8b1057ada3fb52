// wrong: the target is not copied (every replay trains on the first batch's labels)
  int rc = ct_copy_(gr->static_x, d->x[i % NBATCH], false); // static_input.copy_(real_input)
  if (rc == CT_OK) rc = ct_cuda_graph_replay(gr->g); // g.replay()
  return rc;
