#include "services/router/backends.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "services/common/log.h"
#include "services/common/tls.h"

namespace specdec::services {
namespace {

std::chrono::system_clock::time_point In(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

}  // namespace

Backends::~Backends() {
  // Members are destroyed in reverse order, the drafter info cache before the sets; a probe that
  // saw a drafter go down would reset an entry of a destroyed vector.
  targets_.reset();
  drafters_.reset();
  policies_.reset();
}

absl::StatusOr<std::unique_ptr<ReplicaSet>> Backends::MakeSet(const RouterServerOptions& options,
                                                              const std::string& list,
                                                              const char* service) {
  ReplicaSet::Options o;
  o.service = service;
  ASSIGN_OR_RETURN(o.credentials, MakeChannelCredentials(options.backend_tls));
  o.addresses = SplitAddresses(list);
  o.probe_interval = std::chrono::milliseconds(std::max(10, options.health_interval_ms));
  o.probe_timeout = std::min(o.probe_interval, std::chrono::milliseconds(500));
  o.on_change = [this, service, addresses = o.addresses](size_t i, bool healthy) {
    metrics_->replica_healthy.Add({{"service", service}, {"address", addresses[i]}})
        .Set(healthy ? 1 : 0);
    if (!healthy && std::string(service) == "drafter") {
      std::lock_guard<std::mutex> lock(info_mu_);
      if (i < drafter_info_.size()) drafter_info_[i].reset();
    }
  };
  return ReplicaSet::Create(std::move(o));
}

absl::StatusOr<std::unique_ptr<Backends>> Backends::Connect(const RouterServerOptions& options,
                                                            RouterMetrics* metrics) {
  if (SplitAddresses(options.target_address).empty()) {
    return absl::InvalidArgumentError("--target is required: the target service's address");
  }
  auto b = std::unique_ptr<Backends>(new Backends());
  b->metrics_ = metrics;
  b->target_drafting_ = options.target_drafting;
  ASSIGN_OR_RETURN(b->targets_, b->MakeSet(options, options.target_address, "target"));
  for (size_t i = 0; i < b->targets_->size(); ++i) {
    b->target_stubs_.push_back(v1::Target::NewStub(b->targets_->channel(i)));
  }
  if (!SplitAddresses(options.drafter_address).empty()) {
    ASSIGN_OR_RETURN(b->drafters_, b->MakeSet(options, options.drafter_address, "drafter"));
    {
      std::lock_guard<std::mutex> lock(b->info_mu_);
      b->drafter_info_.resize(b->drafters_->size());
    }
    for (size_t i = 0; i < b->drafters_->size(); ++i) {
      b->drafter_stubs_.push_back(v1::Drafter::NewStub(b->drafters_->channel(i)));
    }
  }
  if (!SplitAddresses(options.policy_address).empty()) {
    ASSIGN_OR_RETURN(b->policies_, b->MakeSet(options, options.policy_address, "policy"));
    for (size_t i = 0; i < b->policies_->size(); ++i) {
      b->policy_stubs_.push_back(v1::Policy::NewStub(b->policies_->channel(i)));
    }
  }
  for (ReplicaSet* set : {b->drafters_.get(), b->policies_.get()}) {
    if (set) set->ProbeAll();
  }
  RETURN_IF_ERROR(b->ConnectTargets(options));
  if (b->drafters_) {
    // Best effort: a drafter that is down now may come up later; methods degrade meanwhile.
    for (size_t i = 0; i < b->drafters_->size(); ++i) {
      auto info = b->DrafterInfo(i, In(1000));
      if (info.ok() && info->block_size() > 0) b->drafter_has_dflash_ = true;
    }
  }
  return b;
}

// Asks every target replica for its ModelInfo: they must serve one model, and one must answer.
absl::Status Backends::ConnectTargets(const RouterServerOptions& options) {
  std::string answered_from, errors;
  hosted_dflash_.resize(targets_->size());
  for (size_t i = 0; i < targets_->size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(answered_from.empty() ? In(options.connect_timeout_ms) : In(1000));
    ctx.set_wait_for_ready(answered_from.empty());
    v1::ModelInfo info;
    grpc::Status s = target_stubs_[i]->GetInfo(&ctx, v1::GetInfoRequest(), &info);
    if (!s.ok()) {
      absl::StrAppend(&errors, " ", targets_->address(i), ": ", s.error_message(), ";");
      targets_->MarkUnhealthy(i);
      continue;
    }
    for (const v1::DraftModelInfo& dm : info.draft_models()) {
      if (dm.kind() == v1::DFLASH_DRAFTER && dm.model().block_size() > 0) {
        hosted_dflash_[i] = dm.model();
      }
    }
    if (answered_from.empty()) {
      target_info_ = info;
      answered_from = targets_->address(i);
    } else if (info.vocab_size() != target_info_.vocab_size() ||
               info.max_context() != target_info_.max_context() ||
               info.name() != target_info_.name()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target replicas ", answered_from, " and ", targets_->address(i),
          " serve different models (name/vocab/context differ): list replicas of one model"));
    }
  }
  if (answered_from.empty()) {
    return absl::UnavailableError(absl::StrCat("no target replica answered GetInfo:", errors));
  }
  all_hosted_ = true;
  for (const auto& h : hosted_dflash_) {
    any_hosted_ = any_hosted_ || h.has_value();
    all_hosted_ = all_hosted_ && h.has_value();
  }
  return absl::OkStatus();
}

std::optional<size_t> Backends::Pick(ReplicaSet& set, const char* service,
                                     const std::vector<size_t>& exclude) {
  auto i = set.Pick(exclude);
  if (i)
    metrics_->replica_picks.Add({{"service", service}, {"address", set.address(*i)}}).Increment();
  return i;
}

void Backends::NoteFailure(ReplicaSet& set, size_t i, const absl::Status& status) {
  Log(LogLevel::kWarning, "backend_failure",
      absl::StrCat(" service=", set.service(), " address=", set.address(i),
                   " code=", absl::StatusCodeToString(status.code()),
                   " message=", LogValue(status.message())));
  if (status.code() == absl::StatusCode::kUnavailable) set.MarkUnhealthy(i);
}

absl::StatusOr<v1::ModelInfo> Backends::DrafterInfo(
    size_t i, std::chrono::system_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(info_mu_);
    if (drafter_info_[i]) return *drafter_info_[i];
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  v1::ModelInfo info;
  grpc::Status s = drafter_stubs_[i]->GetInfo(&ctx, v1::GetInfoRequest(), &info);
  if (!s.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat("drafter ", drafters_->address(i), " GetInfo: ", s.error_message()));
  }
  std::lock_guard<std::mutex> lock(info_mu_);
  drafter_info_[i] = info;
  return info;
}

std::optional<v1::ModelInfo> Backends::PolicyInfo() {
  if (!policies_) return std::nullopt;
  for (size_t i = 0; i < policies_->size(); ++i) {
    if (!policies_->healthy(i)) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(500));
    v1::ModelInfo info;
    if (policy_stubs_[i]->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok()) return info;
  }
  return std::nullopt;
}

void Backends::FillInfo(v1::RouterInfo* info) {
  *info->mutable_target() = target_info_;
  info->add_methods(v1::AR);
  info->add_methods(v1::NGRAM);
  if (drafters_) {
    info->add_methods(v1::DRAFT_CHAIN);
    info->add_methods(v1::DYSPEC_TREE);
    for (size_t i = 0; i < drafters_->size(); ++i) {
      if (!drafters_->healthy(i)) continue;
      if (auto d = DrafterInfo(i, In(500)); d.ok()) {
        *info->mutable_drafter() = *d;
        break;
      }
    }
  }
  if (ServesDflash()) {
    info->add_methods(v1::DFLASH);
    info->add_methods(v1::DFLASH_ADAPTIVE);
  }
  if (auto p = PolicyInfo()) *info->mutable_policy() = *p;
  info->set_default_method(DefaultMethod());
}

}  // namespace specdec::services
