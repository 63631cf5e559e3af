// specdec-policy: serves BlockPilot block-size predictions over gRPC.
#ifndef SPECDEC_SERVICES_POLICY_POLICY_SERVICE_H_
#define SPECDEC_SERVICES_POLICY_POLICY_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/metrics_server.h"
#include "services/common/tls.h"

namespace specdec::services {

struct PolicyServerOptions {
  std::string address = "127.0.0.1:50053";         // gRPC; port 0 picks a free port
  std::string metrics_address = "127.0.0.1:9093";  // /metrics; empty = do not serve
  TlsFiles tls;            // the gRPC port's TLS (services/common/tls.h); empty: plaintext
  std::string policy_dir;  // BlockPilot checkpoint (config + safetensors)
  int drain_ms = 2000;     // graceful shutdown budget
};

// A running policy server: the gRPC service, its batching loop and its metrics.
// Start and Shutdown are called from one thread; the service itself is thread-safe.
class PolicyServer {
 public:
  static absl::StatusOr<std::unique_ptr<PolicyServer>> Start(const PolicyServerOptions& options);
  ~PolicyServer();
  int port() const;
  int metrics_port() const;
  prometheus::Registry& registry();
  void Shutdown();

 private:
  struct Impl;
  explicit PolicyServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs a policy server until SIGINT/SIGTERM, then drains and stops.
int RunPolicyServer(const PolicyServerOptions& options);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_POLICY_POLICY_SERVICE_H_
