// wrong: the backward goes through the bare module even after dp's forward
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;
  ct_tensor *logits = dp ? ct_data_parallel_forward(dp, x) : ct_module_forward(model, x);
  if (!logits) return NULL;
  ct_tensor *dlogits = NULL;
  ct_tensor *loss = ct_cross_entropy_loss(logits, y, &dlogits);
  ct_free(logits);
  if (!loss) return NULL;
  int rc = ct_module_backward_params(model, dlogits);
  ct_free(dlogits);
  if (rc != CT_OK || ct_optimizer_step(opt) != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
