// The step loop's sides in the router: the target, drafter and policy of one request, reached
// over the services' gRPC streams (a Session stream per request on a picked replica).
#ifndef SPECDEC_SERVICES_ROUTER_REMOTE_SIDES_H_
#define SPECDEC_SERVICES_ROUTER_REMOTE_SIDES_H_

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "common/engine/request.h"
#include "common/engine/step_loop.h"
#include "services/router/backends.h"
#include "services/router/stream_clients.h"

namespace specdec::services {

using Deadline = std::chrono::system_clock::time_point;

// The target replica that takes the prefill (the next healthy one while they answer
// UNAVAILABLE: nothing was committed yet) and its Session stream. Features of committed rows
// that a drafter service will need are kept until it takes them. Not thread-safe.
class RemoteTarget final : public engine::TargetSide {
 public:
  // `capture`: the layers a DFlash drafter service reads; `try_hosted`: draft on the target when
  // the replica hosts a DFlash drafter.
  RemoteTarget(Backends& backends, CallScope scope, const engine::DecodeOptions& options,
               std::vector<int64_t> capture, bool try_hosted);

  absl::StatusOr<engine::PrefillResult> Prefill(std::span<const int32_t> prompt,
                                                const engine::PrefillAsk& ask) override;
  absl::StatusOr<engine::StepResult> Verify(int32_t last, const engine::Draft& draft,
                                            bool want_features) override;
  absl::Status Run(int32_t last, const engine::RunPlan& plan,
                   const engine::StepSink& sink) override;
  int32_t HostedBlockSize() const override;

  // The features of the rows committed since the last call (BF16 [rows, width]; empty if none).
  v1::Tensor TakeFeatures();

 private:
  v1::TargetRequest PrefillRequest(std::span<const int32_t> prompt,
                                   const engine::PrefillAsk& ask) const;
  absl::StatusOr<v1::TargetResponse> Call(const v1::TargetRequest& request, const char* what);
  engine::StepResult FromResult(const v1::TargetVerifyResult& result, double ms);
  absl::Status Failed(const absl::Status& status);

  Backends& backends_;
  const CallScope scope_;
  const engine::DecodeOptions& options_;
  const std::vector<int64_t> capture_;
  const bool try_hosted_;
  std::optional<size_t> replica_;
  bool hosted_ = false;
  std::unique_ptr<TargetClient> client_;
  std::string handle_;
  v1::Tensor features_;
};

// A drafter service replica's session: the AR draft model (chains, trees) or the DFlash drafter
// (blocks, fed the features `target` keeps). Not thread-safe.
class RemoteDrafter final : public engine::DrafterSide {
 public:
  // `trained_block`: the DFlash drafter's training block size (DFLASH*), from its ModelInfo.
  RemoteDrafter(Backends& backends, size_t replica, CallScope scope,
                const engine::DecodeOptions& options, RemoteTarget* target, int32_t trained_block);

  absl::Status Open(std::span<const int32_t> prompt) override;
  absl::StatusOr<engine::Draft> Propose(int32_t last, const engine::DraftShape& shape) override;
  absl::Status Accept(const engine::StepResult& step) override;
  int32_t TrainedBlockSize() const override { return trained_block_; }
  bool WantsFeatures() const override { return dflash_; }

 private:
  absl::StatusOr<v1::DrafterResponse> Call(const v1::DrafterRequest& request, const char* what);

  Backends& backends_;
  const size_t replica_;
  const CallScope scope_;
  const engine::DecodeOptions& options_;
  RemoteTarget* target_;
  const bool dflash_;
  const int32_t trained_block_;
  std::unique_ptr<DrafterClient> client_;
  std::string handle_;
};

// BlockPilot on a policy service replica, asked once per request.
class RemotePolicy final : public engine::BlockPolicy {
 public:
  RemotePolicy(Backends& backends, Deadline deadline) : backends_(backends), deadline_(deadline) {}
  absl::StatusOr<engine::BlockChoice> ChooseBlockSize(std::span<const float> last_logits) override;

 private:
  Backends& backends_;
  const Deadline deadline_;
};

// The sides of one request: a target replica is picked at prefill; the drafter replica is picked
// first (DFlash's prefill captures the layers its drafter reads) unless every target replica
// hosts a drafter; NGRAM needs none (the target drafts by prompt lookup in its runs).
// `drafter_unavailable` says why there is no drafter when a method needs one.
struct RemoteSides {
  std::unique_ptr<RemoteTarget> target;
  std::unique_ptr<engine::DrafterSide> drafter;  // a drafter service's
  std::unique_ptr<RemotePolicy> policy;
  absl::Status drafter_unavailable = absl::UnavailableError("no drafter service is configured");

  // The step loop's parts on these sides: target, drafter, policy, why there is no drafter, and
  // the context of `backends`' target. The caller adds the hook, cancellation and streaming.
  engine::LoopParts Parts(const Backends& backends) const;
};
RemoteSides ConnectSides(Backends& backends, CallScope scope, const engine::DecodeOptions& options);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_REMOTE_SIDES_H_
