// wrong: off by one in top-k (keeps top_k + 1 tokens)
  for (int64_t i = 0; i < V; ++i) z[i] = (double)logits[i] / temperature;
  double cut = -INFINITY; // logits below the k-th largest are dropped
  if (top_k > 0 && top_k < V) {
    double *sorted = z + V; // the second half of the scratch
    memcpy(sorted, z, (size_t)V * sizeof *z);
    qsort(sorted, (size_t)V, sizeof *sorted, cmp_desc);
    cut = sorted[top_k];
  }
  const double zmax = z[best];
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += z[i] = z[i] < cut ? 0.0 : exp(z[i] - zmax);
  double target = u * total, acc = 0;
  for (int64_t i = 0; i < V; ++i)
    if (z[i] > 0 && (acc += z[i]) > target) return i;
  return best; // rounding left target at the very end
