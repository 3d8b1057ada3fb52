// wrong: off by one, the last replica's gradient is dropped
  for (int r = 1; r < k - 1; ++r) {
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
