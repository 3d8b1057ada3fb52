// wrong: steps before the backward (each step uses the previous batch's gradient)
      pred = must(ct_module_forward(model, xb));
      loss = must(ct_mse_loss(pred, yb, &g));
      ok(ct_optimizer_step(opt));
      ok(ct_optimizer_zero_grad(opt, true));
      ok(ct_module_backward_params(model, g));
