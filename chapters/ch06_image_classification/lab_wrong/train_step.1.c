// wrong: no zero_grad (the gradients of every step pile up)
  ct_tensor *logits = ct_module_forward(model, x);              // (B, 10)
  if (!logits) return NULL;
  ct_tensor *dlogits = NULL;                                    // (B, 10): (softmax - onehot) / B
  ct_tensor *loss = ct_cross_entropy_loss(logits, y, &dlogits); // loss_fn(logits, y)
  ct_free(logits);
  if (!loss) return NULL;
  int rc = ct_module_backward_params(model, dlogits); // loss.backward(): grads into param->grad
  ct_free(dlogits);
  if (rc != CT_OK || ct_optimizer_step(opt) != CT_OK) { // optimizer.step()
    ct_free(loss);
    return NULL;
  }
  return loss;
