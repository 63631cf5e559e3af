// Process-wide compute settings for the ATen runtime.
#ifndef SPECDEC_COMMON_MODEL_RUNTIME_H_
#define SPECDEC_COMMON_MODEL_RUNTIME_H_

namespace specdec::model {

// Sets the intra-op thread count (libtorch starts with 1 here). `threads <= 0` means the number of
// online cores. Returns the count now in force. Call once at startup, before any forward pass.
int ConfigureComputeThreads(int threads);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_RUNTIME_H_
