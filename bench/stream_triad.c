// The machine's memory bandwidth, STREAM-style: a[i] = b[i] + 3 c[i] over three 256 MiB arrays of
// doubles, best of 5, counting 24 bytes per element (the reads and the write, no write-allocate),
// with OMP_NUM_THREADS threads; once on 4 KiB pages and once on 2 MiB transparent huge pages
// (madvise), as specdec keeps a model's weights. The floor of a memory-bound decode step is its
// weight bytes over the higher of the two.
//   gcc -O2 -fopenmp bench/stream_triad.c -o /tmp/stream_triad
//   OMP_NUM_THREADS=1 /tmp/stream_triad; OMP_NUM_THREADS=2 /tmp/stream_triad
// The model bench links it (as C++, without main) for its --floor rounds.
#include "stream_triad.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double Seconds(void) {
#ifdef _OPENMP
  return omp_get_wtime();
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

static const size_t kPage = 2UL << 20;

// The distance between two of the triad's arrays of n doubles: 2 MiB aligned, with 2 MiB between
// the end of one and the start of the next. Arrays exactly a power of two apart map their
// elements i to the same cache sets and memory banks: a malloc that hands out such blocks
// (tcmalloc) made the triad lose a third of its bandwidth.
static size_t Stride(long n) { return (n * sizeof(double) + kPage - 1) / kPage * kPage + kPage; }

// Maps room for three arrays of n doubles (*map and *bytes for munmap) and returns the first
// one's 2 MiB aligned start, advised onto transparent huge pages if `huge`; NULL on failure.
static char* MapArrays(long n, int huge, void** map, size_t* bytes) {
  *bytes = 3 * Stride(n) + kPage;
  *map = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (*map == MAP_FAILED) return NULL;
  char* base = (char*)(((size_t)*map + kPage - 1) / kPage * kPage);
  if (huge) madvise(base, 3 * Stride(n), MADV_HUGEPAGE);
  return base;
}

double StreamTriadGbs(int huge, int threads) {
  (void)threads;  /* without OpenMP: the calling thread */
  const long n = 1L << 25;
  void* map = NULL;
  size_t bytes = 0;
  char* base = MapArrays(n, huge, &map, &bytes);
  if (base == NULL) return 0;
  double* a = (double*)base;
  double* b = (double*)(base + Stride(n));
  double* c = (double*)(base + 2 * Stride(n));
#pragma omp parallel for num_threads(threads)
  for (long i = 0; i < n; i++) {
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    const double t = Seconds();
#pragma omp parallel for num_threads(threads)
    for (long i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
    const double dt = Seconds() - t;
    if (dt < best) best = dt;
  }
  const double gbs = a[n / 2] == 7.0 ? 3.0 * n * sizeof(double) / best / 1e9 : 0;
  munmap(map, bytes);
  return gbs;
}

#ifndef STREAM_TRIAD_NO_MAIN
int main(void) {
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const double small = StreamTriadGbs(0, threads), huge = StreamTriadGbs(1, threads);
  printf("threads %d: triad %.1f GB/s (4 KiB pages %.1f, 2 MiB pages %.1f)\n", threads,
         small > huge ? small : huge, small, huge);
  return 0;
}
#endif
