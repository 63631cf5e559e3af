// The machine's memory bandwidth, STREAM-style: a[i] = b[i] + 3 c[i] over three 256 MiB arrays of
// doubles, best of 5, counting 24 bytes per element (the reads and the write, no write-allocate),
// with OMP_NUM_THREADS threads; once on 4 KiB pages and once on 2 MiB transparent huge pages
// (madvise), as specdec keeps a model's weights. The floor of a memory-bound decode step is its
// weight bytes over the higher of the two.
//   gcc -O2 -fopenmp bench/stream_triad.c -o /tmp/stream_triad
//   OMP_NUM_THREADS=1 /tmp/stream_triad; OMP_NUM_THREADS=2 /tmp/stream_triad
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static double* Array(long n, int huge) {
  const size_t page = 2UL << 20;
  const size_t bytes = (n * sizeof(double) + page - 1) / page * page;
  void* p = NULL;
  if (posix_memalign(&p, page, bytes) != 0) return NULL;
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

static double Triad(int huge) {
  const long n = 1L << 25;
  double* a = Array(n, huge);
  double* b = Array(n, huge);
  double* c = Array(n, huge);
  if (a == NULL || b == NULL || c == NULL) return 0;
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
  const double gbs = a[n / 2] == 7.0 ? 3.0 * n * sizeof(double) / best / 1e9 : 0;
  free(a);
  free(b);
  free(c);
  return gbs;
}

int main(void) {
  const double small = Triad(0), huge = Triad(1);
  printf("threads %d: triad %.1f GB/s (4 KiB pages %.1f, 2 MiB pages %.1f)\n", omp_get_max_threads(),
         small > huge ? small : huge, small, huge);
  return 0;
}
