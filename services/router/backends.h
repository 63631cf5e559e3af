// The router's backends: the replica sets of the target, drafter and policy services, a stub per
// replica, and what each serves (its ModelInfo).
#ifndef SPECDEC_SERVICES_ROUTER_BACKENDS_H_
#define SPECDEC_SERVICES_ROUTER_BACKENDS_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/router/replica_set.h"
#include "services/router/router_metrics.h"
#include "services/router/router_service.h"
#include "specdec/v1/drafter.grpc.pb.h"
#include "specdec/v1/policy.grpc.pb.h"
#include "specdec/v1/router.grpc.pb.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::services {

// Replica sets probe health in the background and pick round robin. Every target replica must
// serve the same model; at least one must answer at Connect. Read-only after Connect except the
// drafter info cache, which is thread-safe.
class Backends {
 public:
  // Connects to every configured service; `metrics` counts picks and health changes.
  static absl::StatusOr<std::unique_ptr<Backends>> Connect(const RouterServerOptions& options,
                                                           RouterMetrics* metrics);
  // Stops the replica sets' probe threads before the state their health callbacks write.
  ~Backends();

  ReplicaSet& targets() { return *targets_; }
  ReplicaSet* drafters() { return drafters_.get(); }  // null when not configured
  ReplicaSet* policies() { return policies_.get(); }  // null when not configured
  v1::Target::Stub* target_stub(size_t i) { return target_stubs_[i].get(); }
  v1::Drafter::Stub* drafter_stub(size_t i) { return drafter_stubs_[i].get(); }
  v1::Policy::Stub* policy_stub(size_t i) { return policy_stubs_[i].get(); }

  const v1::ModelInfo& target_info() const { return target_info_; }
  // The DFlash drafter target replica `i` hosts (its GetInfo at startup), if any.
  const std::optional<v1::ModelInfo>& hosted_dflash(size_t i) const { return hosted_dflash_[i]; }
  // DFLASH* requests draft on the target when the replica they land on hosts a drafter.
  bool TargetDrafting() const { return target_drafting_ && any_hosted_; }
  bool AllTargetsHost() const { return all_hosted_; }
  bool ServesDflash() const { return (drafters_ && drafter_has_dflash_) || TargetDrafting(); }
  v1::Method DefaultMethod() const { return ServesDflash() ? v1::DFLASH_ADAPTIVE : v1::AR; }
  // GetInfo's answer: the models behind the router and the methods it can serve now.
  void FillInfo(v1::RouterInfo* info);

  // Picks a healthy replica of `set` (not in `exclude`), counting the pick; nullopt when none.
  std::optional<size_t> Pick(ReplicaSet& set, const char* service,
                             const std::vector<size_t>& exclude = {});
  // Logs a backend failure and marks replica `i` of `set` down when `status` says it is gone
  // (UNAVAILABLE).
  static void NoteFailure(ReplicaSet& set, size_t i, const absl::Status& status);
  // Drafter replica `i`'s ModelInfo, asked once (and again after the replica was down).
  absl::StatusOr<v1::ModelInfo> DrafterInfo(size_t i,
                                            std::chrono::system_clock::time_point deadline);

 private:
  Backends() = default;
  absl::Status ConnectTargets(const RouterServerOptions& options);
  absl::StatusOr<std::unique_ptr<ReplicaSet>> MakeSet(const RouterServerOptions& options,
                                                      const std::string& list, const char* service);
  std::optional<v1::ModelInfo> PolicyInfo();

  RouterMetrics* metrics_ = nullptr;
  bool target_drafting_ = true;
  std::unique_ptr<ReplicaSet> targets_, drafters_, policies_;
  std::vector<std::unique_ptr<v1::Target::Stub>> target_stubs_;
  std::vector<std::unique_ptr<v1::Drafter::Stub>> drafter_stubs_;
  std::vector<std::unique_ptr<v1::Policy::Stub>> policy_stubs_;
  v1::ModelInfo target_info_;
  std::vector<std::optional<v1::ModelInfo>> hosted_dflash_;
  bool any_hosted_ = false, all_hosted_ = false;
  bool drafter_has_dflash_ = false;  // some drafter replica serves DFlash (GetInfo at startup)
  std::mutex info_mu_;
  std::vector<std::optional<v1::ModelInfo>> drafter_info_;  // per replica; reset when it goes down
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_BACKENDS_H_
