// wrong: broadcast from rank 0 instead of the last rank
  ct_tensor *t = filled(r + 1, 4, d);
  rc = t ? ct_dist_all_reduce(pg, t, CT_REDUCE_SUM) : -1;         // dist.all_reduce(t)
  sum = t ? first(t) : NAN;
  ct_free(t);
  t = filled(100 + r, 4, d);
  if (!rc) rc = t ? ct_dist_broadcast(pg, t, 0) : -1;          // dist.broadcast(t, src=w-1)
  bcast = t ? first(t) : NAN;
  ct_free(t);
  if (!rc) rc = in ? ct_dist_all_gather(pg, out, in) : -1;        // dist.all_gather(out, in)
