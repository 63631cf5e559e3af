// SPECDEC_TARGET_CLONES: a kernel built for AVX-512, AVX2 and baseline x86-64 CPUs, the version
// picked when the program loads (an ifunc resolver). TSan builds (scripts/sanitize.sh) build the
// baseline only: the resolver runs while the dynamic loader relocates, before TSan's runtime is
// initialised, and its instrumentation crashes there. Clang (the fuzz harnesses' compiler) builds
// the baseline only too: it refuses the kernels' 64-byte vector values between a clone and the
// always-inline helpers it calls, which carry no target of their own.
#ifndef SPECDEC_COMMON_MODEL_TARGET_CLONES_H_
#define SPECDEC_COMMON_MODEL_TARGET_CLONES_H_

#if defined(__SANITIZE_THREAD__) || defined(__clang__)
#define SPECDEC_TARGET_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPECDEC_TARGET_CLONES
#endif
#endif
#ifndef SPECDEC_TARGET_CLONES
#define SPECDEC_TARGET_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

#endif  // SPECDEC_COMMON_MODEL_TARGET_CLONES_H_
