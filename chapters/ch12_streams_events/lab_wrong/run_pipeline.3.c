// wrong: the wrong stream waits (copy waits for its own event, compute for nothing)
    if (rc == CT_OK && sc.wait) rc = ct_stream_wait_event(copy, k->copied[i]);
    if (rc == CT_OK && sc.record) rc = ct_record_stream(d, compute);
