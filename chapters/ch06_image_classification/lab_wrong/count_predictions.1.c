// wrong: the confusion matrix indexed [predicted][true]
  for (int64_t i = 0; i < n; ++i) {
    r->confusion[pred[i]][label[i]] += 1;
    if (pred[i] == label[i]) r->correct += 1;
  }
  r->total += n;
