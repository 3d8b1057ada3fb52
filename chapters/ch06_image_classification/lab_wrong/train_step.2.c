// wrong: steps before the backward (each step uses the previous batch's gradient)
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL; // optimizer.zero_grad()
  ct_tensor *logits = ct_module_forward(model, x);              // (B, 10)
  if (!logits) return NULL;
  ct_tensor *dlogits = NULL;                                    // (B, 10): (softmax - onehot) / B
  ct_tensor *loss = ct_cross_entropy_loss(logits, y, &dlogits); // loss_fn(logits, y)
  ct_free(logits);
  if (!loss) return NULL;
  int rc = ct_optimizer_step(opt);
  if (rc == CT_OK) rc = ct_module_backward_params(model, dlogits);
  ct_free(dlogits);
  if (rc != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
