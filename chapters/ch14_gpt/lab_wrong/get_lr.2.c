// wrong: the cosine decays to 0 instead of min_lr
  if (it < s->warmup_iters) return s->lr * (double)(it + 1) / (double)(s->warmup_iters + 1);
  if (it >= s->max_iters) return s->min_lr;
  double ratio = (double)(it - s->warmup_iters) / (double)(s->max_iters - s->warmup_iters);
  double coeff = 0.5 * (1.0 + cos(acos(-1.0) * ratio)); // 1 -> 0
  return coeff * s->lr;
