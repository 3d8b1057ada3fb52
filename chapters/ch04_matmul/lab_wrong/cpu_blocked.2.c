// wrong: the K slice not clipped: off by one, the last partial slice is skipped
#pragma omp parallel for collapse(2) schedule(static) if ((double)M * N * K >= 2e6) // tiny: one thread
  for (int i0 = 0; i0 < M; i0 += CPU_BM)
    for (int j0 = 0; j0 < N; j0 += CPU_BN) {
      const int i1 = imin(i0 + CPU_BM, M), j1 = imin(j0 + CPU_BN, N);
      for (int i = i0; i < i1; ++i)
        for (int j = j0; j < j1; ++j) c[(size_t)i * N + j] = 0.0f;
      for (int k0 = 0; k0 + CPU_BK <= K; k0 += CPU_BK) {
        const int k1 = k0 + CPU_BK;
        for (int i = i0; i < i1; ++i) {
          float *ci = c + (size_t)i * N;       // row i of C
          const float *ai = a + (size_t)i * K; // row i of A
          for (int k = k0; k < k1; ++k) {
            const float aik = ai[k];
            const float *bk = b + (size_t)k * N; // row k of B
#pragma omp simd
            for (int j = j0; j < j1; ++j) ci[j] += aik * bk[j];
          }
        }
      }
    }
