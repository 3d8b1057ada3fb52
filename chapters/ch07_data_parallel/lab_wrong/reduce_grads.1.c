// wrong: off by one, starts at replica 0 (the module adds its own gradient to itself)
  for (int r = 0; r < k; ++r) {
    int nr = 0;
    ct_param **src = ct_module_parameters(dp->replicas[r], &nr);
    for (int i = 0; i < np && i < nr; ++i) {
      if (!src[i]->grad) continue;
      ct_tensor *g = ct_to_device(src[i]->grad, dp->devices[0]);
      int rc = g ? cti_param_accumulate_grad(dst[i], g) : (int)ct_last_status();
      ct_free(g);
      if (rc) return rc;
    }
  }
