// wrong: no zero_grad, so every step's gradient piles up in .grad
  ct_tensor *logits = dp ? ct_data_parallel_forward(dp, x) : ct_module_forward(model, x);
  if (!logits) return NULL;
  ct_tensor *dlogits = NULL;
  ct_tensor *loss = ct_cross_entropy_loss(logits, y, &dlogits);
  ct_free(logits);
  if (!loss) return NULL;
  int rc = dp ? ct_data_parallel_backward_params(dp, dlogits) : ct_module_backward_params(model, dlogits);
  ct_free(dlogits);
  if (rc != CT_OK || ct_optimizer_step(opt) != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
