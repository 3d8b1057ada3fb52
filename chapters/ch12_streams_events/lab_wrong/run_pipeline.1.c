// wrong: no wait, compute reads the chunk while the copy stream may still write it
    if (rc == CT_OK && sc.record) rc = ct_record_stream(d, compute);
