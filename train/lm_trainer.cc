#include "train/lm_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model/runtime.h"
#include "common/model/weights.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint.h"
#include "train/lm_model.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/time_budget.h"
#include "train/token_file.h"
#include "train/train_common.h"

namespace specdec::train {
namespace {

nlohmann::json OptionsJson(const LmTrainOptions& o, const model::ModelConfig& c) {
  return {{"train_tokens", o.train_tokens},
          {"heldout_tokens", o.heldout_tokens},
          {"batch_size", o.batch_size},
          {"seq_len", o.seq_len},
          {"grad_accum", o.grad_accum},
          {"steps", o.steps},
          {"lr", o.lr},
          {"min_lr_ratio", o.min_lr_ratio},
          {"warmup_frac", o.warmup_frac},
          {"weight_decay", o.weight_decay},
          {"clip", o.clip},
          {"init_std", o.init_std},
          {"dtype", o.dtype},
          {"device", o.device},
          {"seed", o.seed},
          {"config", nlohmann::json::parse(model::ModelConfigToJson(c))}};
}

double HeldoutLoss(const model::ModelConfig& c, const TensorMap& params,
                   std::span<const int32_t> ids, const LmTrainOptions& o, at::ScalarType dt,
                   const at::Device& device) {
  if (static_cast<int64_t>(ids.size()) < o.seq_len + 1) return NAN;
  at::NoGradGuard no_grad;
  double sum = 0;
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    at::Tensor x = FixedWindows(ids, b * o.batch_size, o.batch_size, o.seq_len + 1, device);
    sum += LmLoss(c, params, x, dt).item<double>();
  }
  return sum / static_cast<double>(o.eval_batches);
}

// The model to train: the options' shape with the tokenizer's vocabulary and special tokens,
// checked against the training tokens.
absl::StatusOr<model::ModelConfig> ModelFor(const LmTrainOptions& o,
                                            const tokenizer::Tokenizer& tok,
                                            std::span<const int32_t> train_ids,
                                            at::ScalarType export_dt) {
  model::ModelConfig c = o.config;
  if (c.vocab_size == 0) c.vocab_size = tok.vocab_size();
  if (c.vocab_size < tok.vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", c.vocab_size, " is below the tokenizer's ", tok.vocab_size()));
  }
  for (int32_t id : train_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.train_tokens, ": token id ", id, " outside the vocabulary"));
    }
  }
  c.torch_dtype = export_dt == at::kBFloat16 ? "bfloat16" : "float32";
  if (tok.bos_id()) c.bos_token_id = *tok.bos_id();
  if (tok.eos_id()) c.eos_token_ids = {*tok.eos_id()};
  return c;
}

// One optimizer step over o.grad_accum random batches: the step's loss (summed over them).
absl::StatusOr<double> LmStep(const LmTrainOptions& o, const model::ModelConfig& c,
                              TensorMap& params, AdamW& opt, std::span<const int32_t> train_ids,
                              int64_t step, double lr, at::ScalarType dt, const at::Device& device,
                              double* grad_norm) {
  std::mt19937_64 rng(o.seed * 1000003ull + static_cast<uint64_t>(step));
  double loss_sum = 0;
  for (int64_t a = 0; a < o.grad_accum; ++a) {
    at::Tensor x = SampleWindows(train_ids, o.batch_size, o.seq_len + 1, rng, device);
    at::Tensor loss = LmLoss(c, params, x, dt) / static_cast<double>(o.grad_accum);
    loss.backward();
    loss_sum += loss.item<double>();
  }
  if (!std::isfinite(loss_sum)) {
    return absl::InternalError(absl::StrCat("loss became ", loss_sum, " at step ", step,
                                            "; lower --lr or use --dtype f32"));
  }
  *grad_norm = opt.ClipGradNorm(o.clip);
  opt.Step(lr);
  return loss_sum;
}

// The model in the HF layout (tokenizer, config, generation config, weights) and training.json.
absl::Status ExportLm(const LmTrainOptions& o, const model::ModelConfig& c, const TensorMap& params,
                      at::ScalarType export_dt, double ema, double heldout, double secs) {
  RETURN_IF_ERROR(CopyTokenizer(o.tokenizer_dir, o.out_dir));
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/config.json", model::ModelConfigToJson(c)));
  nlohmann::json gen = {{"bos_token_id", c.bos_token_id.value_or(0)},
                        {"eos_token_id", c.eos_token_ids.empty() ? 0 : c.eos_token_ids[0]}};
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/generation_config.json", gen.dump(2)));
  RETURN_IF_ERROR(SaveTensorMap(o.out_dir + "/model.safetensors", params, export_dt));
  nlohmann::json summary = {{"command", "specdec train lm"},   {"finished", NowIso8601()},
                            {"parameters", c.NumParameters()}, {"final_train_loss_ema", ema},
                            {"final_heldout_loss", heldout},   {"wall_seconds_this_run", secs},
                            {"options", OptionsJson(o, c)}};
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/training.json", summary.dump(2)));
  std::fprintf(stderr, "lm: wrote %s (heldout loss %.4f)\n", o.out_dir.c_str(), heldout);
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainLm(const LmTrainOptions& o) {
  if (o.batch_size <= 0 || o.seq_len <= 1 || o.steps <= 0 || o.grad_accum <= 0) {
    return absl::InvalidArgumentError("batch_size, steps, grad_accum must be > 0, seq_len > 1");
  }
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  ASSIGN_OR_RETURN(at::Device device, ParseDevice(o.device));
  ASSIGN_OR_RETURN(at::ScalarType dt, ParseDType(o.dtype));
  ASSIGN_OR_RETURN(at::ScalarType export_dt, ParseDType(o.export_dtype));
  if (device.is_cpu()) model::ConfigureTrainingThreads(o.threads);
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::FromFile(o.tokenizer_dir + "/tokenizer.json"));
  ASSIGN_OR_RETURN(std::vector<int32_t> train_ids, ReadTokenFile(o.train_tokens));
  std::vector<int32_t> heldout_ids;
  if (!o.heldout_tokens.empty()) {
    ASSIGN_OR_RETURN(heldout_ids, ReadTokenFile(o.heldout_tokens));
  }
  if (static_cast<int64_t>(train_ids.size()) <= o.seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(o.train_tokens, " holds ", train_ids.size(),
                                                   " tokens, fewer than one window"));
  }
  ASSIGN_OR_RETURN(const model::ModelConfig c, ModelFor(o, *tok, train_ids, export_dt));
  const std::string ckpt_dir =
      o.checkpoint_dir.empty() ? o.out_dir + "/checkpoint" : o.checkpoint_dir;

  TensorMap params;
  try {
    params = InitParams(model::TransformerTensorSpecs(c), c.num_hidden_layers, o.seed, o.init_std,
                        device);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("initializing parameters failed: ", e.what()));
  }
  AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  AdamW opt(&params, adam);
  int64_t step = 0;
  auto resumed = LoadTrainCheckpoint(ckpt_dir, &params, &opt);
  if (resumed.ok()) {
    step = *resumed;
    std::fprintf(stderr, "resuming from %s at step %lld\n", ckpt_dir.c_str(),
                 static_cast<long long>(step));
  } else if (!absl::IsNotFound(resumed.status())) {
    return resumed.status();
  }
  const std::string options_json = OptionsJson(o, c).dump();
  const std::string log_path = ckpt_dir + "/log.jsonl";
  std::filesystem::create_directories(ckpt_dir);
  std::fprintf(stderr, "lm: %lld parameters, %zu train tokens, %zu held-out, device %s, %s\n",
               static_cast<long long>(c.NumParameters()), train_ids.size(), heldout_ids.size(),
               device.str().c_str(), o.dtype.c_str());

  const int64_t warmup = static_cast<int64_t>(o.warmup_frac * o.steps);
  int64_t total_steps = o.steps;
  const auto t0 = std::chrono::steady_clock::now();
  TimeBudget budget(o.time_budget_s, step, t0);
  Progress progress("lm", o.steps, step);
  double ema = NAN, last_heldout = NAN;
  try {
    while (step < total_steps) {
      const double lr = WarmupCosineLr(step, total_steps, warmup, o.lr, o.min_lr_ratio);
      double gnorm = 0;
      ASSIGN_OR_RETURN(const double loss,
                       LmStep(o, c, params, opt, train_ids, step, lr, dt, device, &gnorm));
      ++step;
      ema = std::isnan(ema) ? loss : 0.98 * ema + 0.02 * loss;
      if (const double per_step = budget.AfterStep(step, &total_steps); per_step > 0) {
        std::fprintf(stderr, "\n%.4f s/step: %lld steps fit the %.0f s budget\n", per_step,
                     static_cast<long long>(total_steps), o.time_budget_s);
      }
      const bool last = step == total_steps;
      if ((o.eval_every > 0 && step % o.eval_every == 0) || last) {
        last_heldout = HeldoutLoss(c, params, heldout_ids, o, dt, device);
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        nlohmann::json line = {{"step", step},
                               {"train_loss", ema},
                               {"heldout_loss", last_heldout},
                               {"lr", lr},
                               {"grad_norm", gnorm},
                               {"tokens", step * o.batch_size * o.grad_accum * o.seq_len},
                               {"elapsed_s", secs}};
        RETURN_IF_ERROR(AppendJsonLine(log_path, line.dump()));
      }
      if ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || last) {
        RETURN_IF_ERROR(SaveTrainCheckpoint(ckpt_dir, params, opt, step, options_json));
      }
      progress.Update(step,
                      absl::StrFormat("loss %.3f heldout %.3f lr %.2e", ema, last_heldout, lr));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training step ", step, " failed: ", e.what()));
  }
  progress.Finish(absl::StrFormat("loss %.3f heldout %.3f", ema, last_heldout));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ExportLm(o, c, params, export_dt, ema, last_heldout, secs);
}

}  // namespace specdec::train
