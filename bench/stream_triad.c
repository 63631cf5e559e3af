// The machine's memory bandwidth, STREAM-style: a[i] = b[i] + 3 c[i] over three 256 MiB arrays of
// doubles, best of 5, counting 24 bytes per element (the reads and the write, no write-allocate),
// with OMP_NUM_THREADS threads. The floor of a memory-bound decode step is its weight bytes over
// this bandwidth.
//   gcc -O2 -fopenmp bench/stream_triad.c -o /tmp/stream_triad
//   OMP_NUM_THREADS=1 /tmp/stream_triad; OMP_NUM_THREADS=2 /tmp/stream_triad
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  const long n = 1L << 25;
  double* a = malloc(n * sizeof(double));
  double* b = malloc(n * sizeof(double));
  double* c = malloc(n * sizeof(double));
  if (a == NULL || b == NULL || c == NULL) return 1;
#pragma omp parallel for
  for (long i = 0; i < n; i++) {
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    const double t = omp_get_wtime();
#pragma omp parallel for
    for (long i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
    const double dt = omp_get_wtime() - t;
    if (dt < best) best = dt;
  }
  printf("threads %d: triad %.1f GB/s (check %.0f)\n", omp_get_max_threads(),
         3.0 * n * sizeof(double) / best / 1e9, a[n / 2]);
  free(a);
  free(b);
  free(c);
  return 0;
}
