// wrong: the decay measured from step 0, not from the end of the warm-up
  if (it < s->warmup_iters) return s->lr * (double)(it + 1) / (double)(s->warmup_iters + 1);
  if (it >= s->max_iters) return s->min_lr;
  double ratio = (double)it / (double)s->max_iters;
  double coeff = 0.5 * (1.0 + cos(acos(-1.0) * ratio)); // 1 -> 0
  return s->min_lr + coeff * (s->lr - s->min_lr);
