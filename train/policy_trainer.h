// `specdec train policy-data` and `specdec train policy`: BlockPilot labels from the real DFlash
// loop, and the MLP trained on them (docs/design.md §2.5). Acceptance labels (the default) run
// the largest block once per prompt and record the share of steps accepting each draft position,
// which labels every block size at once; candidates labels run every candidate block size and
// record its tau.
#ifndef SPECDEC_TRAIN_POLICY_TRAINER_H_
#define SPECDEC_TRAIN_POLICY_TRAINER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace specdec::train {

struct PolicyDataOptions {
  std::string target_dir;
  std::string dflash_dir;
  std::string prompt_tokens;  // token file the prompts are cut from
  std::string out_dir;        // part-NNNNN.safetensors files (resumable) + meta.json
  int64_t num_prompts = 512;
  int64_t min_prompt_len = 16;
  int64_t max_prompt_len = 128;
  int32_t max_new_tokens = 96;
  std::string labels = "acceptance";  // acceptance | candidates
  int32_t max_block = 0;              // acceptance: the block drafted (0: the training block B)
  int32_t radius = 2;                 // candidates: B-radius .. B+radius
  std::vector<int32_t> block_sizes;   // candidates: explicit (overrides radius)
  double temperature = 0.0;
  int64_t part_size = 32;  // prompts per part file
  int workers = 0;         // parallel decoders (0 = cores), one compute thread each
  uint64_t seed = 0;
};

absl::Status MakePolicyData(const PolicyDataOptions& options);

struct PolicyTrainOptions {
  std::string data_dir;  // from policy-data
  std::string out_dir;   // BlockPilot directory: config.json, model.safetensors, training.json
  int64_t hidden = 256;
  int32_t input_top_k = 0;  // BlockPilotConfig::input_top_k
  int64_t epochs = 100;
  int64_t batch_size = 64;
  double lr = 1e-3;
  double weight_decay = 0.01;
  double dropout = 0.2;
  double heldout_frac = 0.2;
  uint64_t seed = 0;
};

absl::Status TrainPolicy(const PolicyTrainOptions& options);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_POLICY_TRAINER_H_
