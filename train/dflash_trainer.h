// `specdec train dflash`: trains a DFlash block-diffusion drafter against a frozen target
// (docs/design.md §2.4), on the target's own generations.
#ifndef SPECDEC_TRAIN_DFLASH_TRAINER_H_
#define SPECDEC_TRAIN_DFLASH_TRAINER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace specdec::train {

struct DFlashTrainOptions {
  std::string target_dir;      // HF target (config.json, model.safetensors, tokenizer.json)
  std::string prompt_tokens;   // token file the generation prompts are drawn from
  std::string out_dir;         // drafter export: config.json, model.safetensors, training.json
  std::string checkpoint_dir;  // resumable state and the generated data; default <out>/checkpoint
  // Drafter shape (hidden size and vocabulary come from the target).
  int64_t layers = 2;
  int64_t heads = 0;         // 0 = the target's
  int64_t kv_heads = 0;      // 0 = the target's
  int64_t intermediate = 0;  // 0 = the target's
  int32_t block_size = 16;
  double gamma = 0;  // loss decay; 0 = 7 for b >= 16, 4 otherwise
  // Generation (distillation data): prompts of prompt_len tokens, gen_len new tokens each.
  int64_t gen_sequences = 2048;
  int64_t prompt_len = 64;
  int64_t gen_len = 192;
  int64_t gen_batch = 128;
  double greedy_frac = 0.5;  // share of sequences decoded greedily; the rest sample at T=1
  // Training.
  int64_t batch_size = 16;
  int64_t anchors = 32;  // anchors per sequence (<= available positions)
  int64_t steps = 2000;
  double lr = 6e-4;
  double warmup_frac = 0.04;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.01;
  double clip = 1.0;
  std::string dtype = "f32";
  std::string export_dtype = "bf16";
  std::string device = "cpu";
  int threads = 0;
  int64_t eval_every = 100;
  int64_t checkpoint_every = 200;
  uint64_t seed = 0;
  // > 0: after 20 steps, shrink the step count (and the LR schedule with it) so that training
  // ends within this many seconds.
  double time_budget_s = 0;
};

absl::Status TrainDFlash(const DFlashTrainOptions& options);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_DFLASH_TRAINER_H_
