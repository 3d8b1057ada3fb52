// wrong: charges each call to the outermost module instead of the nearest
  for (int i = 0; i < n; ++i) {
    if (ev[i].kind != CT_EVENT_OP || strcmp(ev[i].name, hot)) continue;
    int mod = -1;
    for (int up = ev[i].parent; up >= 0; up = ev[up].parent)
      if (ev[up].kind == CT_EVENT_MODULE) mod = up;
    const char *who = mod >= 0 ? ev[mod].name : "(no module)";
    int j = 0;
    while (j < k && strcmp(names[j], who)) ++j;
    if (j == k && k < 16) snprintf(names[k++], 64, "%s", who);
    if (j < k) us[j] += device ? ev[i].device_us : ev[i].self_cpu_us, calls[j]++;
  }
