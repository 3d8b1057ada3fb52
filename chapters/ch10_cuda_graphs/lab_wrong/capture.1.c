// wrong: captures on the current stream instead of the side stream
  int rc = ct_cuda_graph_capture_begin(gr->g, NULL, NULL); // with torch.cuda.graph(g, stream=side):
  if (rc != CT_OK) return rc;
  gr->static_loss = train_step(gr->model, gr->opt, gr->static_x, gr->static_y);
  rc = ct_cuda_graph_capture_end(gr->g);
  return rc == CT_OK && gr->static_loss ? CT_OK : -1;
