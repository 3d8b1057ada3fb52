// wrong: never frees h (every activation stays alive, as in training)
  for (int l = 0; l < net->layers; ++l) {
    ct_tensor *z = ct_mm(h, net->w[l]);
    if (!z) return ct_last_status();
    int rc = ct_unary_out(CT_OP_RELU, z, z);
    if (rc) {
      ct_free(z);
      return rc;
    }
    h = z;
  }
