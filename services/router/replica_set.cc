#include "services/router/replica_set.h"

#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace specdec::services {

std::vector<std::string> SplitAddresses(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::string a(absl::StripAsciiWhitespace(part));
    if (!a.empty()) out.push_back(std::move(a));
  }
  return out;
}

ReplicaSet::ReplicaSet(Options options) : options_(std::move(options)) {
  for (const std::string& a : options_.addresses) {
    auto r = std::make_unique<Replica>();
    r->address = a;
    // One address may resolve to several backends (a Kubernetes headless Service): new Session
    // streams are then spread over them too.
    grpc::ChannelArguments args;
    args.SetLoadBalancingPolicyName("round_robin");
    // A restarted backend is reconnected to within about a second: gRPC's default backoff
    // (1 s growing to 120 s, for clients across the internet) left a drafter that had flapped
    // three times unused for 7.7 s after it came back (docs/results/2026-11-25-chaos.md).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    r->channel = grpc::CreateCustomChannel(
        a, options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(), args);
    replicas_.push_back(std::move(r));
  }
  if (options_.on_change) {
    for (size_t i = 0; i < replicas_.size(); ++i) options_.on_change(i, true);
  }
  prober_ = std::thread([this] { ProbeLoop(); });
}

absl::StatusOr<std::unique_ptr<ReplicaSet>> ReplicaSet::Create(Options options) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no ", options.service, " address given: list at least one host:port"));
  }
  std::set<std::string> seen;
  for (const std::string& a : options.addresses) {
    if (a.empty() || !seen.insert(a).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.service, " address '", a, "' is empty or listed twice"));
    }
  }
  return std::unique_ptr<ReplicaSet>(new ReplicaSet(std::move(options)));
}

ReplicaSet::~ReplicaSet() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  prober_.join();
}

size_t ReplicaSet::healthy_count() const {
  return static_cast<size_t>(std::count_if(replicas_.begin(), replicas_.end(),
                                           [](const auto& r) { return r->healthy.load(); }));
}

std::optional<size_t> ReplicaSet::Pick(const std::vector<size_t>& exclude) {
  const size_t n = replicas_.size();
  const size_t start = next_.fetch_add(1);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    if (!replicas_[i]->healthy.load()) continue;
    if (std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
    return i;
  }
  return std::nullopt;
}

void ReplicaSet::MarkUnhealthy(size_t i) { SetHealth(i, false); }

void ReplicaSet::SetHealth(size_t i, bool healthy) {
  if (replicas_[i]->healthy.exchange(healthy) != healthy && options_.on_change) {
    options_.on_change(i, healthy);
  }
}

bool ReplicaSet::Probe(size_t i) const {
  grpc::GenericStub stub(replicas_[i]->channel);
  grpc::Slice empty(std::string(""));  // HealthCheckRequest{service: ""} is 0 bytes
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.probe_timeout);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  if (!done.get_future().get().ok()) return false;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes == std::string("\x08\x01", 2);  // HealthCheckResponse{status: SERVING}
}

void ReplicaSet::ProbeAll() {
  for (size_t i = 0; i < replicas_.size(); ++i) SetHealth(i, Probe(i));
}

void ReplicaSet::ProbeLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, options_.probe_interval, [&] { return stopping_; })) return;
    }
    ProbeAll();
  }
}

std::string ReplicaSet::Describe() const {
  std::string out;
  for (const auto& r : replicas_) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", r->address,
                    r->healthy.load() ? " (healthy)" : " (down)");
  }
  return out;
}

}  // namespace specdec::services
