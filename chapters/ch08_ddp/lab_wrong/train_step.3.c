// wrong: zero_grad inside the loop (only the last micro-batch's gradient is kept)
  double total = 0;
  for (int j = 0; j < acc; ++j) {
    if (ct_optimizer_zero_grad(opt, true) != CT_OK) return -1;
    ct_tensor *x = NULL, *y = NULL;
    if (get_batch(s, k0 + j, B, d, &x, &y) != CT_OK) return -1;
    ct_ddp_set_no_sync(ddp, j < acc - 1);                 // with ddp.no_sync(): ...
    ct_tensor *logits = ct_ddp_forward(ddp, x), *g = NULL; // (B, 10)
    ct_tensor *loss = logits ? ct_cross_entropy_loss(logits, y, &g) : NULL;
    ct_tensor *gs = g ? ct_mul_scalar(g, 1.0 / acc) : NULL; // loss / acc
    double l = 0;
    int rc = gs && ct_item(loss, &l) == CT_OK ? ct_ddp_backward_params(ddp, gs) : -1;
    total += l / acc;
    ct_free(x), ct_free(y), ct_free(logits), ct_free(g), ct_free(gs), ct_free(loss);
    if (rc) return rc;
  }
  *loss_out = total;
  return ct_optimizer_step(opt);
