// wrong: leaves compute as the current stream (def is never made current again)
  if (rc == CT_OK) rc = ct_stream_wait_stream(compute, copy);
  if (rc == CT_OK) rc = ct_event_record(k->end, compute);
  rc2 = ct_stream_wait_stream(def, compute);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(copy);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(compute);
