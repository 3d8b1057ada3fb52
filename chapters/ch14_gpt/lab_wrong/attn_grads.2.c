// wrong: dv = P dYh (P not transposed)
  dP = rc ? NULL : bmm_t(dYh, v, false);      // dYh @ v^T
  dv = rc ? NULL : ct_bmm(Pm, dYh);      // P^T @ dYh
  dS = dP ? causal_softmax_backward(be, st->att, dP, B * nh * T, T, 1.0 / sqrt((double)hs), m->device) : NULL;
  if (!rc && !(dS && dv)) rc = ct_last_status();
  dq = rc ? NULL : ct_bmm(dS, k);             // dS @ k
  dk = dq ? bmm_t(dS, q, true) : NULL;        // dS^T @ q
