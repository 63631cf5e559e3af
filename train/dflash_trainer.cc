#include "train/dflash_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/model/dflash_drafter.h"
#include "common/model/model_config.h"
#include "common/model/runtime.h"
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

// Generates `o.gen_sequences` sequences of prompt_len + gen_len tokens with the target: prompts
// are windows of the prompt tokens, continuations greedy or sampled at T=1.
absl::StatusOr<std::vector<int32_t>> GenerateData(const model::ModelConfig& tc, const TensorMap& tp,
                                                  std::span<const int32_t> prompt_ids,
                                                  const DFlashTrainOptions& o, at::ScalarType dt,
                                                  const at::Device& device) {
  const int64_t total_len = o.prompt_len + o.gen_len;
  std::vector<int32_t> out;
  out.reserve(o.gen_sequences * total_len);
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  at::manual_seed(o.seed + 17);
  Progress progress("generate", o.gen_sequences);
  at::NoGradGuard no_grad;
  for (int64_t done = 0; done < o.gen_sequences; done += o.gen_batch) {
    const int64_t b = std::min(o.gen_batch, o.gen_sequences - done);
    at::Tensor prompt = SampleWindows(prompt_ids, b, o.prompt_len, rng, device);
    const int64_t greedy_rows = static_cast<int64_t>(std::llround(o.greedy_frac * b));
    at::Tensor seq = LmGenerate(tc, tp, prompt, o.gen_len, dt, greedy_rows);
    at::Tensor cpu = seq.to(at::kCPU).to(at::kInt).contiguous();
    out.insert(out.end(), cpu.data_ptr<int32_t>(), cpu.data_ptr<int32_t>() + cpu.numel());
    progress.Update(done + b, "");
  }
  progress.Finish(absl::StrCat(o.gen_sequences, " sequences"));
  return out;
}

struct StepMetrics {
  at::Tensor loss;
  at::Tensor accuracy;  // [b-1] per block position
  at::Tensor tau;       // scalar: mean accepted prefix + 1
};

StepMetrics DFlashLoss(const model::DFlashConfig& dc, const TensorMap& dp,
                       const model::ModelConfig& tc, const TensorMap& tp, const at::Tensor& seqs,
                       const DFlashTrainOptions& o, double gamma, at::ScalarType dt,
                       at::Generator& gen) {
  const int64_t bsz = seqs.size(0), t = seqs.size(1), b = o.block_size;
  at::Tensor features;
  {
    at::NoGradGuard no_grad;
    LmForwardOptions fo;
    fo.compute = dt;
    fo.capture_layers = dc.target_layer_ids;
    auto r = LmForward(tc, tp, seqs, fo);
    features = r.captured.size() == 1 ? r.captured[0] : at::cat(r.captured, 2);
  }
  // Anchors: distinct positions in [prompt_len, t - b] (the generated part) per sequence.
  const int64_t lo = std::min<int64_t>(o.prompt_len, t - b), span = t - b - lo + 1;
  const int64_t a = std::min<int64_t>(o.anchors, span);
  at::Tensor anchors =
      (at::rand({bsz, span}, gen).argsort(1, false).narrow(1, 0, a) + lo).to(seqs.device());
  DFlashBatch batch{seqs, features, anchors};
  at::Tensor hidden = DFlashForward(dc, dp, tc, tp, batch, o.block_size, dt);  // [B,A,b-1,H]
  at::Tensor logits = LmLogits(tc, tp, hidden);                                // f32
  at::Tensor k = at::arange(1, b, seqs.options().dtype(at::kLong));
  at::Tensor label_pos = anchors.unsqueeze(2) + k;  // [B,A,b-1]
  at::Tensor labels = seqs.gather(1, label_pos.reshape({bsz, -1})).view(label_pos.sizes());
  at::Tensor nll = -at::log_softmax(logits, -1).gather(3, labels.unsqueeze(3)).squeeze(3);
  at::Tensor w = at::exp(-(k.to(at::kFloat) - 1) / gamma);
  StepMetrics m;
  m.loss = (nll * w).sum() / (w.sum() * bsz * a);
  at::NoGradGuard no_grad;
  at::Tensor correct = (logits.argmax(-1) == labels).to(at::kFloat);  // [B,A,b-1]
  m.accuracy = correct.mean(0).mean(0);
  m.tau = 1.0 + correct.cumprod(2).sum(2).mean();
  return m;
}

}  // namespace

absl::Status TrainDFlash(const DFlashTrainOptions& o) {
  if (o.block_size < 2 || o.layers <= 0 || o.steps <= 0 || o.batch_size <= 0 || o.anchors <= 0) {
    return absl::InvalidArgumentError("block_size >= 2 and layers, steps, batch, anchors > 0");
  }
  if (o.out_dir.empty() || o.target_dir.empty()) {
    return absl::InvalidArgumentError("--target and --out are required");
  }
  if (o.prompt_len < 1 || o.gen_len < o.block_size + 1) {
    return absl::InvalidArgumentError("prompt_len >= 1 and gen_len > block_size");
  }
  ASSIGN_OR_RETURN(at::Device device, ParseDevice(o.device));
  ASSIGN_OR_RETURN(at::ScalarType dt, ParseDType(o.dtype));
  ASSIGN_OR_RETURN(at::ScalarType export_dt, ParseDType(o.export_dtype));
  if (device.is_cpu()) model::ConfigureComputeThreads(o.threads);
  ASSIGN_OR_RETURN(model::ModelConfig tc, model::LoadModelConfig(o.target_dir));
  ASSIGN_OR_RETURN(TensorMap tp, LoadLmParams(o.target_dir, tc, device));
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::FromFile(o.target_dir + "/tokenizer.json"));
  auto mask_id = tok->TokenToId("<|mask|>");
  if (!mask_id) {
    return absl::FailedPreconditionError(
        "the target's tokenizer has no <|mask|> token for the drafter's block rows");
  }

  model::DFlashConfig dc;
  dc.layers = tc;
  dc.layers.num_hidden_layers = o.layers;
  if (o.heads > 0) dc.layers.num_attention_heads = o.heads;
  if (o.kv_heads > 0) dc.layers.num_key_value_heads = o.kv_heads;
  if (o.intermediate > 0) dc.layers.intermediate_size = o.intermediate;
  dc.layers.head_dim = tc.hidden_size / dc.layers.num_attention_heads;
  dc.layers.qk_norm = true;
  dc.layers.architecture = model::Architecture::kQwen3;
  dc.layers.torch_dtype = export_dt == at::kBFloat16 ? "bfloat16" : "float32";
  dc.block_size = o.block_size;
  dc.mask_token_id = *mask_id;
  dc.target_layer_ids = model::DefaultTargetLayerIds(tc.num_hidden_layers, o.layers);
  const double gamma = o.gamma > 0 ? o.gamma : (o.block_size >= 16 ? 7.0 : 4.0);

  const std::string ckpt_dir =
      o.checkpoint_dir.empty() ? o.out_dir + "/checkpoint" : o.checkpoint_dir;
  std::filesystem::create_directories(ckpt_dir);
  const std::string gen_path = ckpt_dir + "/generated.tok";
  std::vector<int32_t> data;
  const int64_t seq_len = o.prompt_len + o.gen_len;
  if (auto cached = ReadTokenFile(gen_path); cached.ok()) {
    data = std::move(*cached);
    std::fprintf(stderr, "dflash: reusing %zu generated tokens from %s\n", data.size(),
                 gen_path.c_str());
  } else {
    ASSIGN_OR_RETURN(std::vector<int32_t> prompts, ReadTokenFile(o.prompt_tokens));
    if (static_cast<int64_t>(prompts.size()) <= o.prompt_len) {
      return absl::InvalidArgumentError(absl::StrCat(o.prompt_tokens, ": too few tokens"));
    }
    try {
      ASSIGN_OR_RETURN(data, GenerateData(tc, tp, prompts, o, dt, device));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("generating training data failed: ", e.what()));
    }
    RETURN_IF_ERROR(WriteTokenFile(gen_path, data));
  }
  const int64_t num_seqs = static_cast<int64_t>(data.size()) / seq_len;
  if (num_seqs < 2) return absl::InvalidArgumentError("too little generated data");
  // Hold out 5% of the sequences (at least one) for evaluation.
  const int64_t heldout = std::max<int64_t>(1, num_seqs / 20);
  const int64_t train_seqs = num_seqs - heldout;
  at::Tensor all = at::from_blob(data.data(), {num_seqs, seq_len}, at::kInt).to(at::kLong);

  TensorMap dp;
  try {
    dp = InitParams(model::DFlashDrafter::WeightShapes(dc, tc.hidden_size), o.layers, o.seed, 0.02,
                    device);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("initializing the drafter failed: ", e.what()));
  }
  AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  AdamW opt(&dp, adam);
  int64_t step = 0;
  auto resumed = LoadTrainCheckpoint(ckpt_dir, &dp, &opt);
  if (resumed.ok()) {
    step = *resumed;
    std::fprintf(stderr, "resuming from %s at step %lld\n", ckpt_dir.c_str(),
                 static_cast<long long>(step));
  } else if (!absl::IsNotFound(resumed.status())) {
    return resumed.status();
  }
  nlohmann::json options = {{"target", o.target_dir},
                            {"layers", o.layers},
                            {"block_size", o.block_size},
                            {"gamma", gamma},
                            {"gen_sequences", o.gen_sequences},
                            {"prompt_len", o.prompt_len},
                            {"gen_len", o.gen_len},
                            {"greedy_frac", o.greedy_frac},
                            {"batch_size", o.batch_size},
                            {"anchors", o.anchors},
                            {"steps", o.steps},
                            {"lr", o.lr},
                            {"warmup_frac", o.warmup_frac},
                            {"weight_decay", o.weight_decay},
                            {"clip", o.clip},
                            {"dtype", o.dtype},
                            {"device", o.device},
                            {"seed", o.seed},
                            {"target_layer_ids", dc.target_layer_ids},
                            {"mask_token_id", dc.mask_token_id}};
  const std::string log_path = ckpt_dir + "/log.jsonl";
  std::fprintf(stderr, "dflash: %lld parameters, %lld train / %lld held-out sequences of %lld\n",
               static_cast<long long>(CountElements(dp)), static_cast<long long>(train_seqs),
               static_cast<long long>(heldout), static_cast<long long>(seq_len));
  const int64_t warmup = static_cast<int64_t>(o.warmup_frac * o.steps);
  int64_t total_steps = o.steps;
  const auto t0 = std::chrono::steady_clock::now();
  TimeBudget budget(o.time_budget_s, step, t0);
  Progress progress("dflash", o.steps, step);
  double ema = NAN, tau_ema = NAN, eval_tau = NAN, eval_loss = NAN;
  std::vector<double> eval_acc;
  try {
    while (step < total_steps) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 7919 + step);
      at::Tensor idx = at::randint(0, train_seqs, {o.batch_size}, gen, at::kLong);
      at::Tensor seqs = all.index_select(0, idx).to(device);
      StepMetrics m = DFlashLoss(dc, dp, tc, tp, seqs, o, gamma, dt, gen);
      m.loss.backward();
      const double loss = m.loss.item<double>();
      if (!std::isfinite(loss)) {
        return absl::InternalError(absl::StrCat("loss became ", loss, " at step ", step));
      }
      const double gnorm = opt.ClipGradNorm(o.clip);
      const double lr = WarmupCosineLr(step, total_steps, warmup, o.lr, o.min_lr_ratio);
      opt.Step(lr);
      ++step;
      const double tau = m.tau.item<double>();
      ema = std::isnan(ema) ? loss : 0.98 * ema + 0.02 * loss;
      tau_ema = std::isnan(tau_ema) ? tau : 0.98 * tau_ema + 0.02 * tau;
      if (const double per_step = budget.AfterStep(step, &total_steps); per_step > 0) {
        std::fprintf(stderr, "\n%.4f s/step: %lld steps fit the %.0f s budget\n", per_step,
                     static_cast<long long>(total_steps), o.time_budget_s);
      }
      const bool last = step == total_steps;
      if ((o.eval_every > 0 && step % o.eval_every == 0) || last) {
        at::NoGradGuard no_grad;
        auto egen = at::make_generator<at::CPUGeneratorImpl>(12345);
        const int64_t n = std::min<int64_t>(heldout, o.batch_size);
        at::Tensor eseqs = all.narrow(0, train_seqs, n).to(device);
        StepMetrics em = DFlashLoss(dc, dp, tc, tp, eseqs, o, gamma, dt, egen);
        eval_loss = em.loss.item<double>();
        eval_tau = em.tau.item<double>();
        at::Tensor acc = em.accuracy.to(at::kCPU).to(at::kDouble).contiguous();
        eval_acc.assign(acc.data_ptr<double>(), acc.data_ptr<double>() + acc.numel());
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        nlohmann::json line = {{"step", step},
                               {"train_loss", ema},
                               {"train_tau", tau_ema},
                               {"heldout_loss", eval_loss},
                               {"heldout_tau", eval_tau},
                               {"heldout_accuracy_by_position", eval_acc},
                               {"lr", lr},
                               {"grad_norm", gnorm},
                               {"elapsed_s", secs}};
        RETURN_IF_ERROR(AppendJsonLine(log_path, line.dump()));
      }
      if ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || last) {
        RETURN_IF_ERROR(SaveTrainCheckpoint(ckpt_dir, dp, opt, step, options.dump()));
      }
      progress.Update(
          step, absl::StrFormat("loss %.3f tau %.2f heldout tau %.2f", ema, tau_ema, eval_tau));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("drafter training step ", step, " failed: ", e.what()));
  }
  progress.Finish(absl::StrFormat("loss %.3f heldout tau %.2f", ema, eval_tau));
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/config.json", model::DFlashConfigToJson(dc)));
  RETURN_IF_ERROR(SaveTensorMap(o.out_dir + "/model.safetensors", dp, export_dt));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json summary = {{"command", "specdec train dflash"},
                            {"finished", NowIso8601()},
                            {"parameters", CountElements(dp)},
                            {"final_train_loss_ema", ema},
                            {"heldout_loss", eval_loss},
                            {"heldout_tau_teacher_forced", eval_tau},
                            {"heldout_accuracy_by_position", eval_acc},
                            {"wall_seconds_this_run", secs},
                            {"options", options}};
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/training.json", summary.dump(2)));
  std::fprintf(stderr, "dflash: wrote %s\n", o.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace specdec::train
