// wrong: no zero_grad, so the gradients of every step pile up in .grad
      pred = must(ct_module_forward(model, xb));
      loss = must(ct_mse_loss(pred, yb, &g));
      ok(ct_module_backward_params(model, g));
      ok(ct_optimizer_step(opt));
