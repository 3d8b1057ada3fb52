// wrong: adds up every op's time, not only the hottest op's
  for (int i = 0; i < n; ++i) {
    if (ev[i].kind != CT_EVENT_OP) continue;
    int mod = module_of(ev, i);
    const char *who = mod >= 0 ? ev[mod].name : "(no module)";
    int j = 0;
    while (j < k && strcmp(names[j], who)) ++j;
    if (j == k && k < 16) snprintf(names[k++], 64, "%s", who);
    if (j < k) us[j] += device ? ev[i].device_us : ev[i].self_cpu_us, calls[j]++;
  }
