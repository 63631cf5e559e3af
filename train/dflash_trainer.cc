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

absl::Status CheckOptions(const DFlashTrainOptions& o) {
  if (o.block_size < 2 || o.layers <= 0 || o.steps <= 0 || o.batch_size <= 0 || o.anchors <= 0) {
    return absl::InvalidArgumentError("block_size >= 2 and layers, steps, batch, anchors > 0");
  }
  if (o.out_dir.empty() || o.target_dir.empty()) {
    return absl::InvalidArgumentError("--target and --out are required");
  }
  if (o.prompt_len < 1 || o.gen_len < o.block_size + 1) {
    return absl::InvalidArgumentError("prompt_len >= 1 and gen_len > block_size");
  }
  return absl::OkStatus();
}

// The drafter's shape: the target's layers, narrowed by the options, reading the target's
// default layers and filling block rows with the tokenizer's <|mask|>.
absl::StatusOr<model::DFlashConfig> DrafterConfig(const DFlashTrainOptions& o,
                                                  const model::ModelConfig& tc,
                                                  at::ScalarType export_dt) {
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
  return dc;
}

// The target's generations the drafter learns from: read back from the checkpoint directory
// when an earlier run made them, else generated and saved there.
absl::StatusOr<std::vector<int32_t>> TrainingData(const DFlashTrainOptions& o,
                                                  const std::string& ckpt_dir,
                                                  const model::ModelConfig& tc, const TensorMap& tp,
                                                  at::ScalarType dt, const at::Device& device) {
  const std::string gen_path = ckpt_dir + "/generated.tok";
  if (auto cached = ReadTokenFile(gen_path); cached.ok()) {
    std::fprintf(stderr, "dflash: reusing %zu generated tokens from %s\n", cached->size(),
                 gen_path.c_str());
    return std::move(*cached);
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> prompts, ReadTokenFile(o.prompt_tokens));
  if (static_cast<int64_t>(prompts.size()) <= o.prompt_len) {
    return absl::InvalidArgumentError(absl::StrCat(o.prompt_tokens, ": too few tokens"));
  }
  std::vector<int32_t> data;
  try {
    ASSIGN_OR_RETURN(data, GenerateData(tc, tp, prompts, o, dt, device));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("generating training data failed: ", e.what()));
  }
  RETURN_IF_ERROR(WriteTokenFile(gen_path, data));
  return data;
}

nlohmann::json OptionsJson(const DFlashTrainOptions& o, const model::DFlashConfig& dc,
                           double gamma) {
  return {{"target", o.target_dir},
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
}

// What a training run works on: the models, the data split, the optimizer and where it writes.
struct DFlashRun {
  model::ModelConfig tc;
  TensorMap tp;
  model::DFlashConfig dc;
  TensorMap dp;
  at::ScalarType dt = at::kFloat;
  at::Device device = at::kCPU;
  double gamma = 0;
  at::Tensor
      all;  // [sequences, prompt_len + gen_len]: the first train_seqs train, the rest held out
  int64_t train_seqs = 0, heldout = 0;
  std::string ckpt_dir;
  nlohmann::json options;
};

// The running state the log and the summary report.
struct DFlashProgress {
  double ema = NAN, tau_ema = NAN, eval_tau = NAN, eval_loss = NAN;
  std::vector<double> eval_acc;
};

// Teacher-forced loss, tau and per-position accuracy on up to a batch of held-out sequences.
void EvaluateHeldout(const DFlashTrainOptions& o, const DFlashRun& r, DFlashProgress& p) {
  at::NoGradGuard no_grad;
  auto egen = at::make_generator<at::CPUGeneratorImpl>(12345);
  const int64_t n = std::min<int64_t>(r.heldout, o.batch_size);
  at::Tensor eseqs = r.all.narrow(0, r.train_seqs, n).to(r.device);
  StepMetrics em = DFlashLoss(r.dc, r.dp, r.tc, r.tp, eseqs, o, r.gamma, r.dt, egen);
  p.eval_loss = em.loss.item<double>();
  p.eval_tau = em.tau.item<double>();
  at::Tensor acc = em.accuracy.to(at::kCPU).to(at::kDouble).contiguous();
  p.eval_acc.assign(acc.data_ptr<double>(), acc.data_ptr<double>() + acc.numel());
}

// One optimizer step on a random training batch: its loss and teacher-forced tau folded into
// the running averages; the learning rate and gradient norm it used.
struct StepReport {
  double lr = 0, grad_norm = 0;
};
absl::StatusOr<StepReport> TrainStep(const DFlashTrainOptions& o, DFlashRun& r, AdamW& opt,
                                     int64_t step, int64_t total_steps, int64_t warmup,
                                     DFlashProgress& p) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 7919 + step);
  at::Tensor idx = at::randint(0, r.train_seqs, {o.batch_size}, gen, at::kLong);
  at::Tensor seqs = r.all.index_select(0, idx).to(r.device);
  StepMetrics m = DFlashLoss(r.dc, r.dp, r.tc, r.tp, seqs, o, r.gamma, r.dt, gen);
  m.loss.backward();
  const double loss = m.loss.item<double>();
  if (!std::isfinite(loss)) {
    return absl::InternalError(absl::StrCat("loss became ", loss, " at step ", step));
  }
  StepReport report;
  report.grad_norm = opt.ClipGradNorm(o.clip);
  report.lr = WarmupCosineLr(step, total_steps, warmup, o.lr, o.min_lr_ratio);
  opt.Step(report.lr);
  const double tau = m.tau.item<double>();
  p.ema = std::isnan(p.ema) ? loss : 0.98 * p.ema + 0.02 * loss;
  p.tau_ema = std::isnan(p.tau_ema) ? tau : 0.98 * p.tau_ema + 0.02 * tau;
  return report;
}

// Trains from `step` until the step count (or the time budget) is reached, logging held-out
// metrics and checkpointing as the options ask.
absl::Status TrainSteps(const DFlashTrainOptions& o, DFlashRun& r, AdamW& opt, int64_t step,
                        DFlashProgress& p) {
  const std::string log_path = r.ckpt_dir + "/log.jsonl";
  const int64_t warmup = static_cast<int64_t>(o.warmup_frac * o.steps);
  int64_t total_steps = o.steps;
  const auto t0 = std::chrono::steady_clock::now();
  TimeBudget budget(o.time_budget_s, step, t0);
  Progress progress("dflash", o.steps, step);
  try {
    while (step < total_steps) {
      ASSIGN_OR_RETURN(const StepReport report, TrainStep(o, r, opt, step, total_steps, warmup, p));
      ++step;
      if (const double per_step = budget.AfterStep(step, &total_steps); per_step > 0) {
        std::fprintf(stderr, "\n%.4f s/step: %lld steps fit the %.0f s budget\n", per_step,
                     static_cast<long long>(total_steps), o.time_budget_s);
      }
      const bool last = step == total_steps;
      if ((o.eval_every > 0 && step % o.eval_every == 0) || last) {
        EvaluateHeldout(o, r, p);
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        nlohmann::json line = {{"step", step},
                               {"train_loss", p.ema},
                               {"train_tau", p.tau_ema},
                               {"heldout_loss", p.eval_loss},
                               {"heldout_tau", p.eval_tau},
                               {"heldout_accuracy_by_position", p.eval_acc},
                               {"lr", report.lr},
                               {"grad_norm", report.grad_norm},
                               {"elapsed_s", secs}};
        RETURN_IF_ERROR(AppendJsonLine(log_path, line.dump()));
      }
      if ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || last) {
        RETURN_IF_ERROR(SaveTrainCheckpoint(r.ckpt_dir, r.dp, opt, step, r.options.dump()));
      }
      progress.Update(step, absl::StrFormat("loss %.3f tau %.2f heldout tau %.2f", p.ema, p.tau_ema,
                                            p.eval_tau));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("drafter training step ", step, " failed: ", e.what()));
  }
  progress.Finish(absl::StrFormat("loss %.3f heldout tau %.2f", p.ema, p.eval_tau));
  return absl::OkStatus();
}

// The drafter (config.json, model.safetensors) and training.json in the output directory.
absl::Status WriteDrafter(const DFlashTrainOptions& o, const DFlashRun& r, const DFlashProgress& p,
                          at::ScalarType export_dt, double secs) {
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/config.json", model::DFlashConfigToJson(r.dc)));
  RETURN_IF_ERROR(SaveTensorMap(o.out_dir + "/model.safetensors", r.dp, export_dt));
  nlohmann::json summary = {{"command", "specdec train dflash"},
                            {"finished", NowIso8601()},
                            {"parameters", CountElements(r.dp)},
                            {"final_train_loss_ema", p.ema},
                            {"heldout_loss", p.eval_loss},
                            {"heldout_tau_teacher_forced", p.eval_tau},
                            {"heldout_accuracy_by_position", p.eval_acc},
                            {"wall_seconds_this_run", secs},
                            {"options", r.options}};
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/training.json", summary.dump(2)));
  std::fprintf(stderr, "dflash: wrote %s\n", o.out_dir.c_str());
  return absl::OkStatus();
}

// The models, the data split and the drafter's fresh parameters of a run.
absl::StatusOr<DFlashRun> PrepareRun(const DFlashTrainOptions& o, at::ScalarType export_dt) {
  DFlashRun r;
  ASSIGN_OR_RETURN(r.device, ParseDevice(o.device));
  ASSIGN_OR_RETURN(r.dt, ParseDType(o.dtype));
  if (r.device.is_cpu()) model::ConfigureTrainingThreads(o.threads);
  ASSIGN_OR_RETURN(r.tc, model::LoadModelConfig(o.target_dir));
  ASSIGN_OR_RETURN(r.tp, LoadLmParams(o.target_dir, r.tc, r.device));
  ASSIGN_OR_RETURN(r.dc, DrafterConfig(o, r.tc, export_dt));
  r.gamma = o.gamma > 0 ? o.gamma : (o.block_size >= 16 ? 7.0 : 4.0);
  r.ckpt_dir = o.checkpoint_dir.empty() ? o.out_dir + "/checkpoint" : o.checkpoint_dir;
  std::filesystem::create_directories(r.ckpt_dir);
  ASSIGN_OR_RETURN(std::vector<int32_t> data,
                   TrainingData(o, r.ckpt_dir, r.tc, r.tp, r.dt, r.device));
  const int64_t seq_len = o.prompt_len + o.gen_len;
  const int64_t num_seqs = static_cast<int64_t>(data.size()) / seq_len;
  if (num_seqs < 2) return absl::InvalidArgumentError("too little generated data");
  // Hold out 5% of the sequences (at least one) for evaluation.
  r.heldout = std::max<int64_t>(1, num_seqs / 20);
  r.train_seqs = num_seqs - r.heldout;
  r.all = at::from_blob(data.data(), {num_seqs, seq_len}, at::kInt).to(at::kLong);
  try {
    r.dp = InitParams(model::DFlashDrafter::WeightShapes(r.dc, r.tc.hidden_size), o.layers, o.seed,
                      0.02, r.device);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("initializing the drafter failed: ", e.what()));
  }
  r.options = OptionsJson(o, r.dc, r.gamma);
  std::fprintf(stderr, "dflash: %lld parameters, %lld train / %lld held-out sequences of %lld\n",
               static_cast<long long>(CountElements(r.dp)), static_cast<long long>(r.train_seqs),
               static_cast<long long>(r.heldout), static_cast<long long>(seq_len));
  return r;
}

}  // namespace

absl::Status TrainDFlash(const DFlashTrainOptions& o) {
  RETURN_IF_ERROR(CheckOptions(o));
  ASSIGN_OR_RETURN(at::ScalarType export_dt, ParseDType(o.export_dtype));
  ASSIGN_OR_RETURN(DFlashRun r, PrepareRun(o, export_dt));
  AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  AdamW opt(&r.dp, adam);
  int64_t step = 0;
  auto resumed = LoadTrainCheckpoint(r.ckpt_dir, &r.dp, &opt);
  if (resumed.ok()) {
    step = *resumed;
    std::fprintf(stderr, "resuming from %s at step %lld\n", r.ckpt_dir.c_str(),
                 static_cast<long long>(step));
  } else if (!absl::IsNotFound(resumed.status())) {
    return resumed.status();
  }
  const auto t0 = std::chrono::steady_clock::now();
  DFlashProgress p;
  RETURN_IF_ERROR(TrainSteps(o, r, opt, step, p));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return WriteDrafter(o, r, p, export_dt, secs);
}

}  // namespace specdec::train
