#include "train/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace specdec::train {

AdamW::AdamW(TensorMap* params, AdamWOptions options) : params_(params), options_(options) {
  for (const auto& [name, p] : *params_) {
    m_.emplace(name, at::zeros_like(p, p.options().requires_grad(false)));
    v_.emplace(name, at::zeros_like(p, p.options().requires_grad(false)));
  }
}

double AdamW::ClipGradNorm(double max_norm) {
  std::vector<at::Tensor> norms;
  for (auto& [name, p] : *params_) {
    if (p.grad().defined()) norms.push_back(p.grad().to(at::kFloat).pow(2).sum());
  }
  if (norms.empty()) return 0.0;
  const double total = std::sqrt(at::stack(norms).sum().item<double>());
  if (max_norm > 0 && total > max_norm && std::isfinite(total)) {
    const double scale = max_norm / (total + 1e-6);
    for (auto& [name, p] : *params_) {
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
    }
  }
  return total;
}

void AdamW::Step(double lr) {
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  at::NoGradGuard no_grad;
  for (auto& [name, p] : *params_) {
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    at::Tensor& m = m_.at(name);
    at::Tensor& v = v_.at(name);
    m.mul_(b1).add_(g, 1.0 - b1);
    v.mul_(b2).addcmul_(g, g, 1.0 - b2);
    if (options_.weight_decay > 0 && p.dim() >= 2) p.mul_(1.0 - lr * options_.weight_decay);
    at::Tensor denom = (v / bc2).sqrt_().add_(options_.eps);
    p.addcdiv_(m, denom, -lr / bc1);
  }
  ZeroGrad();
}

void AdamW::ZeroGrad() {
  for (auto& [name, p] : *params_) {
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

TensorMap AdamW::State() const {
  TensorMap out;
  for (const auto& [name, t] : m_) out.emplace("m/" + name, t);
  for (const auto& [name, t] : v_) out.emplace("v/" + name, t);
  out.emplace("steps", at::full({1}, steps_, at::kLong));
  return out;
}

absl::Status AdamW::LoadState(const TensorMap& state) {
  for (auto& [name, m] : m_) {
    auto mi = state.find("m/" + name);
    auto vi = state.find("v/" + name);
    if (mi == state.end() || vi == state.end() || !mi->second.sizes().equals(m.sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state lacks or mis-shapes moments of '", name, "'"));
    }
    m.copy_(mi->second);
    v_.at(name).copy_(vi->second);
  }
  auto s = state.find("steps");
  if (s == state.end()) return absl::InvalidArgumentError("optimizer state lacks 'steps'");
  steps_ = s->second.item<int64_t>();
  return absl::OkStatus();
}

double WarmupCosineLr(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio) {
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / warmup;
  const double span = std::max<int64_t>(1, total - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace specdec::train
