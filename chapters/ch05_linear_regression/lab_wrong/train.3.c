// wrong: zero_grad between backward and step (the step sees no gradient)
      pred = must(ct_module_forward(model, xb));
      loss = must(ct_mse_loss(pred, yb, &g));
      ok(ct_module_backward_params(model, g));
      ok(ct_optimizer_zero_grad(opt, true));
      ok(ct_optimizer_step(opt));
