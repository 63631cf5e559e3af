// Process-wide compute settings for the ATen runtime.
#ifndef SPECDEC_COMMON_MODEL_RUNTIME_H_
#define SPECDEC_COMMON_MODEL_RUNTIME_H_

namespace specdec::model {

// Sets the compute threads of the model's kernels (compute_pool.h) for serving and benchmarks, and
// leaves ATen's own operators one thread: libgomp's idle workers spin for a long while after
// each of ATen's parallel regions, on the cores the compute pool's workers need
// (docs/results/2026-11-27-compute-pool.md). `threads <= 0` means the number of online cores.
// SPECDEC_MAX_COMPUTE_THREADS in the environment caps it (a container's CPU quota; the TSan runs
// set it to 1). Returns the count now in force. Call once at startup, before any forward pass.
int ConfigureComputeThreads(int threads);

// The same count for training on the CPU, where ATen's operators (autograd, its matrix
// products) do the work: ATen's threads and the compute pool's both.
int ConfigureTrainingThreads(int threads);

// Bounds the kernel caches of oneDNN (which ATen's bf16 matrix products go through): oneDNN's
// primitive cache and ideep's computation cache keep one compiled kernel (with its buffers) per
// distinct matrix shape, 1024 of each by default. A server whose batches and prompts have ever
// new row counts keeps adding entries of about 0.2 MB each for a long time, which shows as
// resident memory that creeps up for hours. `capacity` entries per cache (0: the libraries'
// defaults) keeps the shapes in use hot and evicts one-off ones (a miss recompiles: about
// 0.25 ms per matrix product). Sets ONEDNN_PRIMITIVE_CACHE_CAPACITY and LRU_CACHE_CAPACITY
// unless the environment already does (which wins). Takes effect only if called before the
// process's first matrix product: call it first thing at startup. Returns the oneDNN capacity
// in force (0: the default).
int ConfigureKernelCache(int capacity);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_RUNTIME_H_
