// wrong: the step runs before the capture begins (the graph records nothing)
  gr->static_loss = train_step(gr->model, gr->opt, gr->static_x, gr->static_y);
  int rc = ct_cuda_graph_capture_begin(gr->g, gr->side, NULL);
  if (rc != CT_OK) return rc;
  rc = ct_cuda_graph_capture_end(gr->g);
  return rc == CT_OK && gr->static_loss ? CT_OK : -1;
