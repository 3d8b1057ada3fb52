// wrong: off by one, the last layer skipped
  for (int l = 0; l < net->layers - 1; ++l) {
    ct_tensor *z = ct_mm(h, net->w[l]);
    ct_free(h);
    if (!z) return ct_last_status();
    int rc = ct_unary_out(CT_OP_RELU, z, z);
    if (rc) {
      ct_free(z);
      return rc;
    }
    h = z;
  }
