// `specdec train lm`: pretrains a Qwen3-architecture causal LM on a token file and exports it in
// the HF layout the runtime serves.
#ifndef SPECDEC_TRAIN_LM_TRAINER_H_
#define SPECDEC_TRAIN_LM_TRAINER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/model/model_config.h"

namespace specdec::train {

struct LmTrainOptions {
  std::string train_tokens;    // token file (train/token_file.h)
  std::string heldout_tokens;  // optional held-out token file
  std::string tokenizer_dir;   // tokenizer.json (+ tokenizer_config.json) copied into the export
  std::string out_dir;         // HF export: config.json, model.safetensors, tokenizer, training.json
  std::string checkpoint_dir;  // resumable state; default <out_dir>/checkpoint
  model::ModelConfig config;   // architecture; vocab_size 0 = the tokenizer's
  int64_t batch_size = 16;
  int64_t seq_len = 256;
  int64_t grad_accum = 1;
  int64_t steps = 1000;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  double warmup_frac = 0.02;
  double weight_decay = 0.1;
  double clip = 1.0;
  double init_std = 0.02;
  std::string dtype = "f32";          // compute dtype: f32 | bf16 (f32 master weights)
  std::string export_dtype = "bf16";  // f32 | bf16
  std::string device = "cpu";
  int threads = 0;                    // CPU intra-op threads (0 = all cores)
  int64_t eval_every = 200;
  int64_t eval_batches = 8;
  int64_t checkpoint_every = 200;
  uint64_t seed = 0;
  // > 0: after 20 steps, shrink the step count (and the LR schedule with it) so that training
  // ends within this many seconds.
  double time_budget_s = 0;
};

// Trains (resuming from the checkpoint directory when it holds a checkpoint), then exports.
absl::Status TrainLm(const LmTrainOptions& options);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_LM_TRAINER_H_
