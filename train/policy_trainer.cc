#include "train/policy_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model/block_pilot.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/tensor_file.h"
#include "train/train_common.h"

namespace specdec::train {
namespace {

// policy-data's examples. Candidates labels: `labels` = tau per candidate [N, C]. Acceptance
// labels: `labels` = the share of steps accepting each draft position [N, P], `weights` = the
// steps that drafted it.
struct PolicyData {
  model::BlockPilotHead head = model::BlockPilotHead::kCandidates;
  at::Tensor logits;  // [N, V]
  at::Tensor labels, weights;
  std::vector<int32_t> block_sizes;  // candidates
  int32_t positions = 0;             // acceptance
  int32_t training_block_size = 0;
  double temperature = 0;  // the sampling temperature the labels were measured at
};

absl::StatusOr<PolicyData> LoadPolicyData(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string meta_text, ReadTextFile(dir + "/meta.json"));
  auto meta = nlohmann::json::parse(meta_text, nullptr, false);
  if (meta.is_discarded()) return absl::InvalidArgumentError(dir + "/meta.json: malformed");
  PolicyData d;
  const bool acceptance = meta.value("labels", std::string("candidates")) == "acceptance";
  try {
    d.training_block_size = meta.at("training_block_size").get<int32_t>();
    d.temperature = meta.value("temperature", 0.0);
    if (acceptance) {
      d.head = model::BlockPilotHead::kAcceptance;
      d.positions = meta.at("positions").get<int32_t>();
    } else {
      d.block_sizes = meta.at("block_sizes").get<std::vector<int32_t>>();
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/meta.json: ", e.what()));
  }
  const char* label_name = acceptance ? "acceptance" : "taus";
  std::vector<at::Tensor> logits, labels, weights;
  for (int64_t part = 0;; ++part) {
    const std::string path = absl::StrFormat("%s/part-%05d.safetensors", dir, part);
    if (!std::filesystem::exists(path)) break;
    ASSIGN_OR_RETURN(TensorMap m, LoadTensorMap(path));
    if (!m.count("logits") || !m.count(label_name) || (acceptance && !m.count("drafted"))) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": lacks logits or ", label_name));
    }
    const int64_t width =
        acceptance ? d.positions : static_cast<int64_t>(d.block_sizes.size());
    const at::Tensor& x = m.at("logits");
    const at::Tensor& l = m.at(label_name);
    const bool same_vocab = logits.empty() || x.size(-1) == logits[0].size(1);
    if (l.dim() != 2 || l.size(1) != width || x.dim() != 2 || x.size(0) != l.size(0) ||
        !same_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", label_name, " must be [rows, ", width,
          "] (meta.json) beside logits [rows, vocab] of the other parts' width"));
    }
    logits.push_back(x);
    labels.push_back(l);
    weights.push_back(acceptance ? m.at("drafted") : at::ones_like(m.at(label_name)));
  }
  if (logits.empty()) return absl::NotFoundError(absl::StrCat(dir, ": no part files"));
  d.logits = at::cat(logits, 0);
  d.labels = at::cat(labels, 0);
  d.weights = at::cat(weights, 0);
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

// The training loss of a batch's MLP outputs. Candidates: cross-entropy against the candidate
// with the highest tau. Acceptance: binary cross-entropy of the predicted curve against the
// observed shares, each position weighted by the steps that drafted it (normalized per prompt).
at::Tensor Loss(model::BlockPilotHead head, const at::Tensor& out, const at::Tensor& labels,
                const at::Tensor& weights) {
  if (head == model::BlockPilotHead::kCandidates) {
    return at::nll_loss(at::log_softmax(out, 1), labels.argmax(1));
  }
  at::Tensor curve = model::BlockPilot::AcceptanceCurve(out).clamp(1e-6, 1 - 1e-6);
  at::Tensor w = weights / weights.sum(1, true).clamp_min(1);
  at::Tensor bce = -(labels * at::log(curve) + (1 - labels) * at::log1p(-curve));
  return (bce * w).sum(1).mean();
}

// Mean tau of choosing `choice` [N] (candidate indices) per row.
double MeanTau(const at::Tensor& taus, const at::Tensor& choice) {
  return taus.gather(1, choice.unsqueeze(1)).mean().item<double>();
}

// Held-out metrics of a candidates policy: accuracy, tau and regret against the oracle, the
// training size and the best fixed size.
nlohmann::json EvaluateCandidates(const PolicyData& d, const at::Tensor& out,
                                  const at::Tensor& te) {
  const int64_t c = static_cast<int64_t>(d.block_sizes.size());
  at::Tensor pred = out.argmax(1);
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
    per_candidate.push_back(
        {{"block_size", d.block_sizes[k]},
         {"mean_tau", mean_by_cand[k].item<double>()},
         {"oracle_share", (oracle == k).to(at::kFloat).mean().item<double>()},
         {"predicted_share", (pred == k).to(at::kFloat).mean().item<double>()}});
  }
  nlohmann::json m = {
      {"heldout_accuracy", (pred == oracle).to(at::kFloat).mean().item<double>()},
      {"heldout_tau_policy", tau_pred},
      {"heldout_tau_oracle", tau_oracle},
      {"heldout_tau_best_fixed", mean_by_cand[best_fixed].item<double>()},
      {"best_fixed_block_size", d.block_sizes[best_fixed]},
      {"heldout_tau_training_block_size", mean_by_cand[train_idx].item<double>()},
      {"mean_regret_policy", tau_oracle - tau_pred},
      {"mean_regret_best_fixed", tau_oracle - mean_by_cand[best_fixed].item<double>()},
      {"per_candidate", per_candidate}};
  std::fprintf(stderr,
               "policy: held-out accuracy %.3f, tau policy %.3f / oracle %.3f / best fixed (b=%d) "
               "%.3f / training size %.3f\n",
               m["heldout_accuracy"].get<double>(), tau_pred, tau_oracle, d.block_sizes[best_fixed],
               mean_by_cand[best_fixed].item<double>(), mean_by_cand[train_idx].item<double>());
  return m;
}

// Held-out metrics of an acceptance policy: per block size b, the mean absolute error of the
// predicted tau(b) = 1 + curve[0] + ... + curve[b-2] against the observed one, beside the error
// of one curve for every request (the training prompts' mean, what a policy without input would
// predict), and the correlation of predicted and observed tau(b) across prompts.
nlohmann::json EvaluateAcceptance(const at::Tensor& out, const at::Tensor& te,
                                  const at::Tensor& mean_curve) {
  at::Tensor tau_obs = 1 + te.cumsum(1);
  at::Tensor tau_pred = 1 + model::BlockPilot::AcceptanceCurve(out).cumsum(1);
  at::Tensor tau_const = 1 + mean_curve.cumsum(0).unsqueeze(0).expand_as(tau_obs);
  nlohmann::json per_block = nlohmann::json::array();
  double err_sum = 0, const_sum = 0;
  for (int64_t i = 0; i < te.size(1); ++i) {
    at::Tensor o = tau_obs.select(1, i), p = tau_pred.select(1, i);
    const double err = (p - o).abs().mean().item<double>();
    const double const_err = (tau_const.select(1, i) - o).abs().mean().item<double>();
    at::Tensor oc = o - o.mean(), pc = p - p.mean();
    const double corr =
        (oc * pc).sum().item<double>() /
        std::max(1e-12, std::sqrt((oc * oc).sum().item<double>() * (pc * pc).sum().item<double>()));
    err_sum += err;
    const_sum += const_err;
    per_block.push_back({{"block_size", i + 2},
                         {"mean_tau_observed", o.mean().item<double>()},
                         {"mean_tau_predicted", p.mean().item<double>()},
                         {"tau_abs_error_policy", err},
                         {"tau_abs_error_mean_curve", const_err},
                         {"tau_correlation", corr}});
  }
  const double n = static_cast<double>(te.size(1));
  nlohmann::json m = {{"heldout_tau_abs_error_policy", err_sum / n},
                      {"heldout_tau_abs_error_mean_curve", const_sum / n},
                      {"per_block", per_block}};
  std::fprintf(
      stderr,
      "policy: held-out mean |tau(b) error| %.3f against %.3f for the mean curve; at "
      "b=4 correlation %.3f\n",
      err_sum / n, const_sum / n,
      per_block[std::min<size_t>(2, per_block.size() - 1)]["tau_correlation"].get<double>());
  return m;
}

model::BlockPilotConfig ConfigFor(const PolicyData& d, const PolicyTrainOptions& o) {
  model::BlockPilotConfig pc;
  pc.vocab_size = d.logits.size(1);
  pc.hidden_size = o.hidden;
  pc.input_top_k = o.input_top_k;
  pc.training_block_size = d.training_block_size;
  pc.head = d.head;
  pc.block_sizes = d.block_sizes;
  pc.positions = d.positions;
  pc.acceptance_temperature = d.temperature;
  if (d.head == model::BlockPilotHead::kAcceptance) {
    for (int32_t b = 2; b <= d.positions + 1; ++b) pc.block_sizes.push_back(b);
  }
  return pc;
}

}  // namespace

absl::Status TrainPolicy(const PolicyTrainOptions& o) {
  if (o.hidden <= 0 || o.epochs <= 0 || o.batch_size <= 0 || o.heldout_frac <= 0 ||
      o.heldout_frac >= 1) {
    return absl::InvalidArgumentError("hidden, epochs, batch > 0 and heldout_frac in (0, 1)");
  }
  ASSIGN_OR_RETURN(PolicyData d, LoadPolicyData(o.data_dir));
  if (o.input_top_k < 0 || o.input_top_k > d.logits.size(1)) {
    return absl::InvalidArgumentError("input_top_k must be in 0..vocab_size");
  }
  const model::BlockPilotConfig pc = ConfigFor(d, o);
  const int64_t n = d.logits.size(0);
  const int64_t n_eval = std::max<int64_t>(1, static_cast<int64_t>(o.heldout_frac * n));
  const int64_t n_train = n - n_eval;
  if (n_train < 1) return absl::InvalidArgumentError("too few examples for a held-out split");
  at::manual_seed(o.seed);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  at::Tensor perm = at::randperm(n, gen, at::kLong);
  at::Tensor x = model::BlockPilot::Features(pc, d.logits).index_select(0, perm);
  at::Tensor y = d.labels.index_select(0, perm);
  at::Tensor wts = d.weights.index_select(0, perm);
  at::Tensor xt = x.narrow(0, 0, n_train), yt = y.narrow(0, 0, n_train);
  at::Tensor wt = wts.narrow(0, 0, n_train);
  at::Tensor xe = x.narrow(0, n_train, n_eval), ye = y.narrow(0, n_train, n_eval);

  TensorMap p;
  for (const auto& s : model::BlockPilot::WeightShapes(pc)) {
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
  Progress progress("policy", steps_per_epoch * o.epochs);
  double loss_ema = NAN;
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    at::Tensor order = at::randperm(n_train, gen, at::kLong);
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      at::Tensor idx =
          order.narrow(0, s * o.batch_size, std::min(o.batch_size, n_train - s * o.batch_size));
      at::Tensor out = Forward(p, xt.index_select(0, idx), o.dropout, true);
      at::Tensor loss = Loss(d.head, out, yt.index_select(0, idx), wt.index_select(0, idx));
      loss.backward();
      opt.Step(o.lr);
      const double l = loss.item<double>();
      loss_ema = std::isnan(loss_ema) ? l : 0.95 * loss_ema + 0.05 * l;
      progress.Update(epoch * steps_per_epoch + s + 1, absl::StrFormat("loss %.3f", loss_ema));
    }
  }
  progress.Finish(absl::StrFormat("loss %.3f", loss_ema));

  at::NoGradGuard no_grad;
  at::Tensor out = Forward(p, xe, 0.0, false);
  nlohmann::json metrics = d.head == model::BlockPilotHead::kCandidates
                               ? EvaluateCandidates(d, out, ye)
                               : EvaluateAcceptance(out, ye, yt.mean(0));
  metrics["examples"] = n;
  metrics["train_examples"] = n_train;
  metrics["heldout_examples"] = n_eval;
  metrics["final_train_loss_ema"] = loss_ema;
  std::filesystem::create_directories(o.out_dir);
  RETURN_IF_ERROR(WriteTextFile(o.out_dir + "/config.json", model::BlockPilotConfigToJson(pc)));
  RETURN_IF_ERROR(SaveTensorMap(o.out_dir + "/model.safetensors", p, at::kFloat));
  nlohmann::json summary = {{"command", "specdec train policy"},
                            {"finished", NowIso8601()},
                            {"metrics", metrics},
                            {"options",
                             {{"data", o.data_dir},
                              {"hidden", o.hidden},
                              {"input_top_k", o.input_top_k},
                              {"epochs", o.epochs},
                              {"batch_size", o.batch_size},
                              {"lr", o.lr},
                              {"weight_decay", o.weight_decay},
                              {"dropout", o.dropout},
                              {"heldout_frac", o.heldout_frac},
                              {"seed", o.seed}}}};
  return WriteTextFile(o.out_dir + "/training.json", summary.dump(2));
}

}  // namespace specdec::train
