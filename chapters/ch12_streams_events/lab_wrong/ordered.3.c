// wrong: the comparison reversed (ordered when the stream knows less than a's count)
  return a->stream == NONE || a->stream == id || vc->c[a->stream] <= a->at;
