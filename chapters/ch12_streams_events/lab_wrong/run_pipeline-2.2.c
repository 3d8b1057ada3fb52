// wrong: the end is recorded on the copy stream, which does not wait for the last compute
  if (rc == CT_OK) rc = ct_event_record(k->end, copy);
  if (rc == CT_OK) rc = ct_stream_wait_stream(compute, copy);
  rc2 = ct_set_stream(def);
  if (rc2 == CT_OK) rc2 = ct_stream_wait_stream(def, compute);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(copy);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(compute);
