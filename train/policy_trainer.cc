#include "train/policy_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/engine/decoder.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/tensor_file.h"
#include "train/token_file.h"
#include "train/train_common.h"

namespace specdec::train {
namespace {

std::string PartPath(const std::string& dir, int64_t part) {
  return absl::StrFormat("%s/part-%05d.safetensors", dir, part);
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
  std::vector<int32_t> cands = o.block_sizes;
  const int32_t big_b = drafter->config().block_size;
  if (cands.empty()) {
    for (int32_t b = big_b - o.radius; b <= big_b + o.radius; ++b) {
      if (b >= 2) cands.push_back(b);
    }
  }
  // Prompts are fixed by the seed, so a resumed run recomputes exactly the missing parts.
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> len_dist(o.min_prompt_len, o.max_prompt_len);
  std::vector<std::pair<int64_t, int64_t>> prompts;  // (start, len)
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const int64_t len = len_dist(rng);
    std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(ids.size()) - len);
    prompts.emplace_back(start(rng), len);
  }
  std::filesystem::create_directories(o.out_dir);
  nlohmann::json meta = {{"block_sizes", cands},         {"training_block_size", big_b},
                         {"vocab_size", target->config().vocab_size},
                         {"num_prompts", o.num_prompts}, {"part_size", o.part_size},
                         {"max_new_tokens", o.max_new_tokens}, {"temperature", o.temperature},
                         {"min_prompt_len", o.min_prompt_len}, {"max_prompt_len", o.max_prompt_len},
                         {"prompt_tokens", o.prompt_tokens}, {"target", o.target_dir},
                         {"dflash", o.dflash_dir},       {"seed", o.seed}};
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/meta.json", meta.dump(2)));

  engine::EngineModels models;
  models.target = target.get();
  models.dflash = drafter.get();
  const int workers = o.workers > 0 ? o.workers
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t parts = (o.num_prompts + o.part_size - 1) / o.part_size;
  const int64_t vocab = target->config().vocab_size;
  const int64_t c = static_cast<int64_t>(cands.size());
  Progress progress("policy-data", o.num_prompts);
  for (int64_t part = 0; part < parts; ++part) {
    const std::string path = PartPath(o.out_dir, part);
    const int64_t begin = part * o.part_size, end = std::min(o.num_prompts, begin + o.part_size);
    if (std::filesystem::exists(path)) continue;  // done in an earlier run
    const int64_t n = end - begin;
    at::Tensor logits = at::zeros({n, vocab}, at::kFloat);
    at::Tensor taus = at::zeros({n, c}, at::kFloat);
    at::Tensor lens = at::zeros({n}, at::kLong);
    std::atomic<int64_t> next{0};
    std::mutex mu;
    absl::Status error;
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w) {
      pool.emplace_back([&] {
        at::NoGradGuard no_grad;
        for (int64_t i = next++; i < n; i = next++) {
          const auto [start, len] = prompts[begin + i];
          std::span<const int32_t> prompt(ids.data() + start, static_cast<size_t>(len));
          auto cache = target->NewCache();
          model::SequenceInput in;
          in.cache = cache.get();
          in.tokens = prompt;
          in.logits = model::LogitsMode::kLast;
          auto out = target->Forward(std::span(&in, 1));
          if (!out.ok()) {
            std::lock_guard lock(mu);
            error = out.status();
            return;
          }
          logits[i].copy_((*out)[0].logits.squeeze(0));
          lens[i] = len;
          for (int64_t k = 0; k < c; ++k) {
            engine::DecodeOptions d;
            d.method = engine::Method::kDflash;
            d.block_size = cands[k];
            d.max_new_tokens = o.max_new_tokens;
            d.sampling.temperature = static_cast<float>(o.temperature);
            d.sampling.seed = o.seed + begin + i;
            auto r = engine::Decode(models, prompt, d);
            if (!r.ok()) {
              std::lock_guard lock(mu);
              error = r.status();
              return;
            }
            taus[i][k] = r->stats.tau();
          }
          std::lock_guard lock(mu);
          progress.Update(begin + next.load(), "");
        }
      });
    }
    for (auto& t : pool) t.join();
    RETURN_IF_ERROR(error);
    RETURN_IF_ERROR(SaveTensorMap(path, {{"logits", logits}, {"taus", taus}, {"prompt_lens", lens}}));
  }
  progress.Finish(absl::StrCat(parts, " parts in ", o.out_dir));
  return absl::OkStatus();
}

namespace {

struct PolicyData {
  at::Tensor logits;  // [N, V]
  at::Tensor taus;    // [N, C]
  std::vector<int32_t> block_sizes;
  int32_t training_block_size = 0;
};

absl::StatusOr<PolicyData> LoadPolicyData(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string meta_text, ReadTextFile(dir + "/meta.json"));
  auto meta = nlohmann::json::parse(meta_text, nullptr, false);
  if (meta.is_discarded()) return absl::InvalidArgumentError(dir + "/meta.json: malformed");
  PolicyData d;
  d.block_sizes = meta.at("block_sizes").get<std::vector<int32_t>>();
  d.training_block_size = meta.at("training_block_size").get<int32_t>();
  std::vector<at::Tensor> logits, taus;
  for (int64_t part = 0;; ++part) {
    const std::string path = PartPath(dir, part);
    if (!std::filesystem::exists(path)) break;
    ASSIGN_OR_RETURN(TensorMap m, LoadTensorMap(path));
    if (!m.count("logits") || !m.count("taus")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": lacks logits or taus"));
    }
    logits.push_back(m.at("logits"));
    taus.push_back(m.at("taus"));
  }
  if (logits.empty()) return absl::NotFoundError(absl::StrCat(dir, ": no part files"));
  d.logits = at::cat(logits, 0);
  d.taus = at::cat(taus, 0);
  return d;
}

at::Tensor Forward(const TensorMap& p, const at::Tensor& x, double dropout, bool train) {
  at::Tensor h1 = at::dropout(at::relu(at::linear(x, p.at("fc1.weight"), p.at("fc1.bias"))),
                              dropout, train);
  at::Tensor h2 =
      h1 + at::dropout(at::relu(at::linear(h1, p.at("fc2.weight"), p.at("fc2.bias"))), dropout,
                       train);
  return at::linear(h2, p.at("out.weight"), p.at("out.bias"));
}

// Mean tau of choosing `choice` [N] (candidate indices) per row.
double MeanTau(const at::Tensor& taus, const at::Tensor& choice) {
  return taus.gather(1, choice.unsqueeze(1)).mean().item<double>();
}

}  // namespace

absl::Status TrainPolicy(const PolicyTrainOptions& o) {
  if (o.hidden <= 0 || o.epochs <= 0 || o.batch_size <= 0 || o.heldout_frac <= 0 ||
      o.heldout_frac >= 1) {
    return absl::InvalidArgumentError("hidden, epochs, batch > 0 and heldout_frac in (0, 1)");
  }
  ASSIGN_OR_RETURN(PolicyData d, LoadPolicyData(o.data_dir));
  const int64_t n = d.logits.size(0), v = d.logits.size(1);
  const int64_t c = static_cast<int64_t>(d.block_sizes.size());
  const int64_t n_eval = std::max<int64_t>(1, static_cast<int64_t>(o.heldout_frac * n));
  const int64_t n_train = n - n_eval;
  if (n_train < 1) return absl::InvalidArgumentError("too few examples for a held-out split");
  at::manual_seed(o.seed);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  at::Tensor perm = at::randperm(n, gen, at::kLong);
  at::Tensor x = d.logits.index_select(0, perm), taus = d.taus.index_select(0, perm);
  at::Tensor labels = taus.argmax(1);
  at::Tensor xt = x.narrow(0, 0, n_train), yt = labels.narrow(0, 0, n_train);
  at::Tensor xe = x.narrow(0, n_train, n_eval), te = taus.narrow(0, n_train, n_eval);

  model::BlockPilotConfig pc;
  pc.vocab_size = v;
  pc.hidden_size = o.hidden;
  pc.training_block_size = d.training_block_size;
  pc.block_sizes = d.block_sizes;
  std::vector<model::TensorSpec> specs = model::BlockPilot::WeightShapes(pc);
  TensorMap p;
  for (const auto& s : specs) {
    const bool bias = s.name.find("bias") != std::string::npos;
    const double fan_in = static_cast<double>(s.shape.back());
    at::Tensor t = bias ? at::zeros(s.shape) : at::randn(s.shape, gen) / std::sqrt(fan_in);
    p.emplace(s.name, t.requires_grad_(true));
  }
  AdamWOptions adam;
  adam.beta2 = 0.999;
  adam.weight_decay = o.weight_decay;
  AdamW opt(&p, adam);
  const int64_t steps_per_epoch = (n_train + o.batch_size - 1) / o.batch_size;
  const int64_t total = steps_per_epoch * o.epochs;
  Progress progress("policy", total);
  double loss_ema = NAN;
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    at::Tensor order = at::randperm(n_train, gen, at::kLong);
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      at::Tensor idx = order.narrow(0, s * o.batch_size, std::min(o.batch_size, n_train - s * o.batch_size));
      at::Tensor out = Forward(p, xt.index_select(0, idx), o.dropout, true);
      at::Tensor loss = at::nll_loss(at::log_softmax(out, 1), yt.index_select(0, idx));
      loss.backward();
      opt.Step(o.lr);
      const double l = loss.item<double>();
      loss_ema = std::isnan(loss_ema) ? l : 0.95 * loss_ema + 0.05 * l;
      progress.Update(epoch * steps_per_epoch + s + 1, absl::StrFormat("loss %.3f", loss_ema));
    }
  }
  progress.Finish(absl::StrFormat("loss %.3f", loss_ema));

  // ---- held-out evaluation against the oracle, the training size and the best fixed size.
  at::NoGradGuard no_grad;
  at::Tensor pred = Forward(p, xe, 0.0, false).argmax(1);
  at::Tensor oracle = te.argmax(1);
  const double tau_oracle = MeanTau(te, oracle), tau_pred = MeanTau(te, pred);
  at::Tensor mean_by_cand = te.mean(0);
  const int64_t best_fixed = mean_by_cand.argmax().item<int64_t>();
  int64_t train_idx = 0;
  for (int64_t k = 0; k < c; ++k) {
    if (d.block_sizes[k] == d.training_block_size) train_idx = k;
  }
  nlohmann::json per_candidate = nlohmann::json::array();
  for (int64_t k = 0; k < c; ++k) {
    per_candidate.push_back({{"block_size", d.block_sizes[k]},
                             {"mean_tau", mean_by_cand[k].item<double>()},
                             {"oracle_share", (oracle == k).to(at::kFloat).mean().item<double>()},
                             {"predicted_share", (pred == k).to(at::kFloat).mean().item<double>()}});
  }
  nlohmann::json metrics = {
      {"examples", n},
      {"train_examples", n_train},
      {"heldout_examples", n_eval},
      {"heldout_accuracy", (pred == oracle).to(at::kFloat).mean().item<double>()},
      {"heldout_tau_policy", tau_pred},
      {"heldout_tau_oracle", tau_oracle},
      {"heldout_tau_best_fixed", mean_by_cand[best_fixed].item<double>()},
      {"best_fixed_block_size", d.block_sizes[best_fixed]},
      {"heldout_tau_training_block_size", mean_by_cand[train_idx].item<double>()},
      {"mean_regret_policy", tau_oracle - tau_pred},
      {"mean_regret_best_fixed", tau_oracle - mean_by_cand[best_fixed].item<double>()},
      {"per_candidate", per_candidate},
      {"final_train_loss_ema", loss_ema}};
  std::filesystem::create_directories(o.out_dir);
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/config.json", model::BlockPilotConfigToJson(pc)));
  RETURN_IF_ERROR(SaveTensorMap(o.out_dir + "/model.safetensors", p, at::kFloat));
  nlohmann::json summary = {{"command", "specdec train policy"},
                            {"finished", NowIso8601()},
                            {"metrics", metrics},
                            {"options",
                             {{"data", o.data_dir}, {"hidden", o.hidden}, {"epochs", o.epochs},
                              {"batch_size", o.batch_size}, {"lr", o.lr},
                              {"weight_decay", o.weight_decay}, {"dropout", o.dropout},
                              {"heldout_frac", o.heldout_frac}, {"seed", o.seed}}}};
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/training.json", summary.dump(2)));
  std::fprintf(stderr,
               "policy: held-out accuracy %.3f, tau policy %.3f / oracle %.3f / best fixed (b=%d) "
               "%.3f / training size %.3f\n",
               metrics["heldout_accuracy"].get<double>(), tau_pred, tau_oracle,
               d.block_sizes[best_fixed], mean_by_cand[best_fixed].item<double>(),
               mean_by_cand[train_idx].item<double>());
  return absl::OkStatus();
}

}  // namespace specdec::train
