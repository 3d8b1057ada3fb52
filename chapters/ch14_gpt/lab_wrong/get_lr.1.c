// wrong: off by one in the warm-up (it / warmup_iters: the first step has learning rate 0)
  if (it < s->warmup_iters) return s->lr * (double)it / (double)s->warmup_iters;
  if (it >= s->max_iters) return s->min_lr;
  double ratio = (double)(it - s->warmup_iters) / (double)(s->max_iters - s->warmup_iters);
  double coeff = 0.5 * (1.0 + cos(acos(-1.0) * ratio)); // 1 -> 0
  return s->min_lr + coeff * (s->lr - s->min_lr);
