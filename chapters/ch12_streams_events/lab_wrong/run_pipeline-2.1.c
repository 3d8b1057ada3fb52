// wrong: def does not wait for compute, so the sums are read on def unordered
  if (rc == CT_OK) rc = ct_stream_wait_stream(compute, copy);
  if (rc == CT_OK) rc = ct_event_record(k->end, compute);
  rc2 = ct_set_stream(def);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(copy);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(compute);
