// The memory bandwidth of stream_triad.c, as a function for the benchmarks that compare a step
// with its bandwidth floor.
#ifndef SPECDEC_BENCH_STREAM_TRIAD_H_
#define SPECDEC_BENCH_STREAM_TRIAD_H_

#ifdef __cplusplus
extern "C" {
#endif

// The triad's GB/s (best of 5) on `threads` OpenMP threads (the calling thread alone where it is
// built without OpenMP), its arrays on 4 KiB pages (huge_pages 0) or on 2 MiB transparent huge
// pages (1); 0 when the arrays cannot be allocated.
double StreamTriadGbs(int huge_pages, int threads);

#ifdef __cplusplus
}
#endif

#endif  // SPECDEC_BENCH_STREAM_TRIAD_H_
