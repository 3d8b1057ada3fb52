// wrong: off by one: the last image of each batch is not counted
  for (int64_t i = 0; i < n - 1; ++i) {
    r->confusion[label[i]][pred[i]] += 1;
    if (pred[i] == label[i]) r->correct += 1;
  }
  r->total += n;
