// AdamW with decoupled weight decay, global-norm gradient clipping and a warmup + cosine learning
// rate schedule, over a named parameter map; its state saves and loads for resumable training.
#ifndef SPECDEC_TRAIN_OPTIMIZER_H_
#define SPECDEC_TRAIN_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "train/tensor_file.h"

namespace specdec::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // not applied to 1-D tensors (norm weights, biases)
};

class AdamW {
 public:
  // `params` must outlive the optimizer; every tensor in it must require grad.
  AdamW(TensorMap* params, AdamWOptions options);

  // Scales all gradients so their global L2 norm is at most `max_norm` (<= 0: no clipping).
  // Returns the norm before clipping.
  double ClipGradNorm(double max_norm);
  // One update with learning rate `lr`, then zeroes the gradients.
  void Step(double lr);
  void ZeroGrad();

  int64_t steps() const { return steps_; }
  // Moments as "m/<name>", "v/<name>" plus a scalar "steps".
  TensorMap State() const;
  absl::Status LoadState(const TensorMap& state);

 private:
  TensorMap* params_;
  AdamWOptions options_;
  TensorMap m_, v_;
  int64_t steps_ = 0;
};

// Linear warmup over `warmup` steps to `peak`, then cosine decay to `peak * min_ratio` at `total`.
double WarmupCosineLr(int64_t step, int64_t total, int64_t warmup, double peak,
                      double min_ratio = 0.1);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_OPTIMIZER_H_
