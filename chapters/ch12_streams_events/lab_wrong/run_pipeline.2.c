// wrong: no record_stream, the chunk's block goes back to the copy stream while compute uses it
    if (rc == CT_OK && sc.wait) rc = ct_stream_wait_event(compute, k->copied[i]);
