// wrong: the wrong stream's clock (what stream id knows of itself, not of a's stream)
  return a->stream == NONE || a->stream == id || vc->c[id] >= a->at;
