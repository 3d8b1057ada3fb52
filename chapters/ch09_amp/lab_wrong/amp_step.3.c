// wrong: never calls the scaler's update (the scale stays at 2^16, skipping every overflowing step)
  const ct_device_type type = ct_device_of(x).type;
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;
  ct_autocast_enter(type, dt == CT_F32 ? ct_get_autocast_dtype(type) : dt, dt != CT_F32);
  out = ct_module_forward(model, x);
  loss = out ? ct_cross_entropy_loss(out, y, &dlogits) : NULL;
  ct_autocast_exit();
  g = loss ? ct_grad_scaler_scale(scaler, dlogits) : NULL;
  rc = g ? ct_module_backward_params(model, g) : -1;
  if (rc == CT_OK && max_norm > 0) {
    int np = 0;
    ct_param **ps = ct_optimizer_params(opt, &np);
    rc = ct_grad_scaler_unscale_(scaler, opt);
    if (rc == CT_OK) rc = ct_clip_grad_norm_(ps, np, max_norm, NULL);
  }
  if (rc == CT_OK) rc = ct_grad_scaler_step(scaler, opt);
