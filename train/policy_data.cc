// `specdec train policy-data`: BlockPilot's labels from the real DFlash loop (docs/design.md §2.5).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/engine/decoder.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint.h"
#include "train/policy_trainer.h"
#include "train/progress.h"
#include "train/tensor_file.h"
#include "train/token_file.h"
#include "train/train_common.h"

namespace specdec::train {
namespace {

// What the labels of one kind are made of: the block sizes decoded per prompt and the width of a
// label row.
struct LabelPlan {
  bool acceptance = true;
  std::vector<int32_t> blocks;  // acceptance: the one block drafted; candidates: every candidate
  int64_t width = 0;            // acceptance: draft positions; candidates: candidates
};

absl::StatusOr<LabelPlan> PlanLabels(const PolicyDataOptions& o, int32_t trained_block) {
  LabelPlan plan;
  if (o.labels == "acceptance") {
    const int32_t b = o.max_block > 0 ? o.max_block : trained_block;
    if (b < 2) return absl::InvalidArgumentError("--max-block must be at least 2");
    plan.blocks = {b};
    plan.width = b - 1;
    return plan;
  }
  if (o.labels != "candidates") {
    return absl::InvalidArgumentError(
        absl::StrCat("--labels must be acceptance or candidates, got ", o.labels));
  }
  plan.acceptance = false;
  plan.blocks = o.block_sizes;
  if (plan.blocks.empty()) {
    for (int32_t b = trained_block - o.radius; b <= trained_block + o.radius; ++b) {
      if (b >= 2) plan.blocks.push_back(b);
    }
  }
  plan.width = static_cast<int64_t>(plan.blocks.size());
  return plan;
}

// One prompt's labels: its last-position logits and, per label column, the acceptance share of a
// draft position (with the steps that drafted it as the weight) or a candidate's tau.
struct PromptLabels {
  at::Tensor logits;
  std::vector<float> values, weights;
};

absl::StatusOr<PromptLabels> LabelPrompt(const engine::EngineModels& models,
                                         std::span<const int32_t> prompt,
                                         const PolicyDataOptions& o, const LabelPlan& plan,
                                         uint64_t seed) {
  PromptLabels labels;
  auto cache = models.target->NewCache();
  model::SequenceInput in;
  in.cache = cache.get();
  in.tokens = prompt;
  in.logits = model::LogitsMode::kLast;
  ASSIGN_OR_RETURN(auto out, models.target->Forward(std::span(&in, 1)));
  labels.logits = out[0].logits.reshape({-1}).to(at::kFloat);
  for (int32_t b : plan.blocks) {
    engine::DecodeOptions d;
    d.method = engine::Method::kDflash;
    d.block_size = b;
    d.max_new_tokens = o.max_new_tokens;
    d.sampling.temperature = static_cast<float>(o.temperature);
    d.sampling.seed = seed;
    ASSIGN_OR_RETURN(engine::DecodeResult r, engine::Decode(models, prompt, d));
    if (!plan.acceptance) {
      labels.values.push_back(static_cast<float>(r.stats.tau()));
      labels.weights.push_back(1);
      continue;
    }
    for (int64_t i = 0; i < plan.width; ++i) {
      const auto at = [&](const std::vector<int64_t>& v) {
        return static_cast<size_t>(i) < v.size() ? static_cast<double>(v[i]) : 0.0;
      };
      const double drafted = at(r.stats.drafted_per_position);
      labels.values.push_back(drafted > 0 ? at(r.stats.accepted_per_position) / drafted : 0);
      labels.weights.push_back(static_cast<float>(drafted));
    }
  }
  return labels;
}

std::string PartPath(const std::string& dir, int64_t part) {
  return absl::StrFormat("%s/part-%05d.safetensors", dir, part);
}

// The prompts as (start, length) in the token file of `num_ids` tokens, fixed by the seed, so
// that a resumed run recomputes exactly the missing parts.
std::vector<std::pair<int64_t, int64_t>> SamplePrompts(const PolicyDataOptions& o, size_t num_ids) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> len_dist(o.min_prompt_len, o.max_prompt_len);
  std::vector<std::pair<int64_t, int64_t>> prompts;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const int64_t len = len_dist(rng);
    std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(num_ids) - len);
    prompts.emplace_back(start(rng), len);
  }
  return prompts;
}

// meta.json: how the labels were made (`specdec train policy` reads the temperature from it).
nlohmann::json PolicyDataMeta(const PolicyDataOptions& o, const LabelPlan& plan,
                              int32_t training_block, int64_t vocab) {
  nlohmann::json meta = {{"labels", o.labels},
                         {"training_block_size", training_block},
                         {"vocab_size", vocab},
                         {"num_prompts", o.num_prompts},
                         {"part_size", o.part_size},
                         {"max_new_tokens", o.max_new_tokens},
                         {"temperature", o.temperature},
                         {"min_prompt_len", o.min_prompt_len},
                         {"max_prompt_len", o.max_prompt_len},
                         {"prompt_tokens", o.prompt_tokens},
                         {"target", o.target_dir},
                         {"dflash", o.dflash_dir},
                         {"seed", o.seed}};
  if (plan.acceptance) {
    meta["positions"] = plan.width;
    meta["max_block"] = plan.blocks[0];
  } else {
    meta["block_sizes"] = plan.blocks;
  }
  return meta;
}

// Everything one part's prompts share.
struct PartJob {
  const engine::EngineModels& models;
  const std::vector<int32_t>& ids;
  const std::vector<std::pair<int64_t, int64_t>>& prompts;
  const PolicyDataOptions& o;
  const LabelPlan& plan;
  int workers = 1;
  int64_t vocab = 0;
};

// The labels of prompts [begin, end), labelled by `job.workers` threads, as the part's tensors.
absl::StatusOr<TensorMap> LabelPart(const PartJob& job, int64_t begin, int64_t end,
                                    Progress& progress) {
  const int64_t n = end - begin;
  at::Tensor logits = at::zeros({n, job.vocab}, at::kFloat);
  at::Tensor values = at::zeros({n, job.plan.width}, at::kFloat);
  at::Tensor weights = at::zeros({n, job.plan.width}, at::kFloat);
  at::Tensor lens = at::zeros({n}, at::kLong);
  std::atomic<int64_t> next{0};
  std::mutex mu;
  absl::Status error;
  std::vector<std::thread> pool;
  for (int w = 0; w < job.workers; ++w) {
    pool.emplace_back([&] {
      at::NoGradGuard no_grad;
      for (int64_t i = next++; i < n; i = next++) {
        const auto [start, len] = job.prompts[begin + i];
        std::span<const int32_t> prompt(job.ids.data() + start, static_cast<size_t>(len));
        auto labels = LabelPrompt(job.models, prompt, job.o, job.plan, job.o.seed + begin + i);
        std::lock_guard lock(mu);
        if (!labels.ok()) {
          error = labels.status();
          return;
        }
        logits[i].copy_(labels->logits);
        values[i].copy_(at::tensor(labels->values));
        weights[i].copy_(at::tensor(labels->weights));
        lens[i] = len;
        progress.Update(begin + next.load(), "");
      }
    });
  }
  for (auto& t : pool) t.join();
  RETURN_IF_ERROR(error);
  TensorMap m = {{"logits", logits}, {"prompt_lens", lens}};
  if (job.plan.acceptance) {
    m.emplace("acceptance", values);
    m.emplace("drafted", weights);
  } else {
    m.emplace("taus", values);
  }
  return m;
}

}  // namespace

absl::Status MakePolicyData(const PolicyDataOptions& o) {
  if (o.num_prompts <= 0 || o.min_prompt_len < 1 || o.max_prompt_len < o.min_prompt_len ||
      o.max_new_tokens < 1 || o.part_size <= 0) {
    return absl::InvalidArgumentError(
        "num_prompts, part_size, max_new_tokens > 0 and 1 <= min_prompt_len <= max_prompt_len");
  }
  model::ConfigureComputeThreads(1);
  ASSIGN_OR_RETURN(auto target, model::Transformer::Load(o.target_dir));
  ASSIGN_OR_RETURN(auto drafter, model::DFlashDrafter::Load(o.dflash_dir, *target));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadTokenFile(o.prompt_tokens));
  if (static_cast<int64_t>(ids.size()) <= o.max_prompt_len) {
    return absl::InvalidArgumentError(absl::StrCat(o.prompt_tokens, ": too few tokens"));
  }
  const int32_t big_b = drafter->config().block_size;
  ASSIGN_OR_RETURN(const LabelPlan plan, PlanLabels(o, big_b));
  const std::vector<std::pair<int64_t, int64_t>> prompts = SamplePrompts(o, ids.size());
  const int64_t vocab = target->config().vocab_size;
  std::filesystem::create_directories(o.out_dir);
  RETURN_IF_ERROR(
      WriteTextFile(o.out_dir + "/meta.json", PolicyDataMeta(o, plan, big_b, vocab).dump(2)));

  engine::EngineModels models;
  models.target = target.get();
  models.dflash = drafter.get();
  const int workers = o.workers > 0
                          ? o.workers
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const PartJob job{models, ids, prompts, o, plan, workers, vocab};
  const int64_t parts = (o.num_prompts + o.part_size - 1) / o.part_size;
  Progress progress("policy-data", o.num_prompts);
  for (int64_t part = 0; part < parts; ++part) {
    const std::string path = PartPath(o.out_dir, part);
    if (std::filesystem::exists(path)) continue;  // done in an earlier run
    const int64_t begin = part * o.part_size, end = std::min(o.num_prompts, begin + o.part_size);
    ASSIGN_OR_RETURN(TensorMap m, LabelPart(job, begin, end, progress));
    RETURN_IF_ERROR(SaveTensorMap(path, m));
  }
  progress.Finish(absl::StrCat(parts, " parts in ", o.out_dir));
  return absl::OkStatus();
}

}  // namespace specdec::train
