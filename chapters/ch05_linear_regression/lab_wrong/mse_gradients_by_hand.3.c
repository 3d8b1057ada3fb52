// wrong: dL/db as the mean of G instead of its sum
  const double n = (double)ct_numel(pred);
  ct_tensor *diff = ct_sub(pred, y);
  if (!diff) return ct_last_status();
  *d_pred = ct_mul_scalar(diff, 2.0 / n);
  ct_free(diff);
  if (!*d_pred) return ct_last_status();
  ct_tensor *gt = ct_t(*d_pred);
  *d_weight = gt ? ct_mm(gt, x) : NULL;
  ct_free(gt);
  *d_bias = ct_mean_dim(*d_pred, 0, false);
  return *d_weight && *d_bias ? CT_OK : ct_last_status();
