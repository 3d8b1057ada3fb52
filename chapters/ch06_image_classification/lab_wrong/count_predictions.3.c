// wrong: all n images are not added to the total
  for (int64_t i = 0; i < n; ++i) {
    r->confusion[label[i]][pred[i]] += 1;
    if (pred[i] == label[i]) r->correct += 1;
  }
