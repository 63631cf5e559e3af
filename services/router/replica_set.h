// The replicas of one backend service (target, drafter or policy) as the router sees them: one
// channel per configured address, health from the standard gRPC health service, and client-side
// round robin over the replicas currently healthy.
#ifndef SPECDEC_SERVICES_ROUTER_REPLICA_SET_H_
#define SPECDEC_SERVICES_ROUTER_REPLICA_SET_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::services {

// Health model: a replica starts healthy until probed (the owner may call ProbeAll at start-up),
// a background thread probes grpc.health.v1.Health/Check on every replica each `probe_interval`,
// and a caller that saw UNAVAILABLE from a replica marks it unhealthy at once; only a SERVING
// probe makes it healthy again. Thread-safe.
class ReplicaSet {
 public:
  struct Options {
    std::string service;                 // "target", "drafter", "policy": for messages/metrics
    std::vector<std::string> addresses;  // host:port, at least one
    std::chrono::milliseconds probe_interval{1000};
    std::chrono::milliseconds probe_timeout{500};
    // Called on every health change of replica `index` (also once per replica at start).
    std::function<void(size_t index, bool healthy)> on_change;
    // The channels' credentials (null: plaintext).
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };

  // INVALID_ARGUMENT for an empty list or an empty/duplicate address.
  static absl::StatusOr<std::unique_ptr<ReplicaSet>> Create(Options options);
  ~ReplicaSet();  // stops probing

  size_t size() const { return replicas_.size(); }
  const std::string& service() const { return options_.service; }
  const std::string& address(size_t i) const { return replicas_[i]->address; }
  const std::shared_ptr<grpc::Channel>& channel(size_t i) const { return replicas_[i]->channel; }
  bool healthy(size_t i) const { return replicas_[i]->healthy.load(); }
  size_t healthy_count() const;

  // The next healthy replica in round-robin order, skipping those in `exclude` (already tried by
  // this request); nullopt when none is left.
  std::optional<size_t> Pick(const std::vector<size_t>& exclude = {});

  // A call to replica `i` failed in a way that says the replica is gone (UNAVAILABLE).
  void MarkUnhealthy(size_t i);

  // Probes every replica once, now, on the caller's thread (start-up and tests).
  void ProbeAll();

  // "a:1 (healthy), b:2 (down)": for error messages.
  std::string Describe() const;

 private:
  struct Replica {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::atomic<bool> healthy{true};
  };
  explicit ReplicaSet(Options options);
  void SetHealth(size_t i, bool healthy);
  bool Probe(size_t i) const;
  void ProbeLoop();

  Options options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<size_t> next_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread prober_;  // last: starts after every other member is ready
};

// Splits "a:1,b:2" (spaces ignored) into addresses; empty input gives an empty list.
std::vector<std::string> SplitAddresses(const std::string& list);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_REPLICA_SET_H_
