// wrong: off by one, > instead of >= (the access the stream waited for still counts as unordered)
  return a->stream == NONE || a->stream == id || vc->c[a->stream] > a->at;
