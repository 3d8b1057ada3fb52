// wrong: forgets the ReLU
  for (int l = 0; l < net->layers; ++l) {
    ct_tensor *z = ct_mm(h, net->w[l]);
    ct_free(h);
    if (!z) return ct_last_status();
    h = z;
  }
