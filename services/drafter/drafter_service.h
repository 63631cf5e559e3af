// specdec-drafter: hosts draft models (the DFlash block drafter and a small autoregressive draft
// LM) with per-request caches behind handles, served over a bidirectional Session stream.
#ifndef SPECDEC_SERVICES_DRAFTER_DRAFTER_SERVICE_H_
#define SPECDEC_SERVICES_DRAFTER_DRAFTER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/metrics_server.h"
#include "services/common/tls.h"

namespace specdec::services {

struct DrafterServerOptions {
  std::string address = "127.0.0.1:50052";         // gRPC; port 0 picks a free port
  std::string metrics_address = "127.0.0.1:9092";  // /metrics; empty = do not serve
  TlsFiles tls;  // the gRPC port's TLS (services/common/tls.h); empty: plaintext
  // The DFlash drafter shares the target's embedding and LM head, so the drafter service loads
  // the target checkpoint too (its layers are only used for their embedding and head).
  std::string target_dir;
  std::string dflash_dir;    // optional: DFlash drafter checkpoint
  std::string draft_lm_dir;  // optional: small AR draft model checkpoint
  std::string dtype = "auto";
  std::string device = "cpu";  // cpu | cuda | cuda:N (the target copy and the drafters)
  std::string replica = "drafter-0";
  int64_t kv_budget_bytes = int64_t{2} << 30;
  int64_t lease_ms = 60000;
  int threads = 0;
  // Entries per oneDNN kernel cache (model::ConfigureKernelCache; 0 = the libraries' 1024).
  int kernel_cache_capacity = 0;
  int drain_ms = 2000;
  // Continuous batching: DFlash block drafts of up to this many sessions queued together run as
  // one batched drafter pass (1 = one at a time).
  int max_batch = 32;
  // With max_batch > 1: the longest a batch is held for sessions whose next operation is
  // expected within a quarter of a pass (concurrent requests otherwise fall into lockstep and
  // never share a pass); 0 = never held.
  int batch_wait_max_us = 2000;
};

// A running drafter server. Start/Shutdown from one thread; the service is thread-safe.
class DrafterServer {
 public:
  static absl::StatusOr<std::unique_ptr<DrafterServer>> Start(const DrafterServerOptions& options);
  ~DrafterServer();
  int port() const;
  int metrics_port() const;
  prometheus::Registry& registry();
  size_t handles_in_use() const;
  void Shutdown();

  struct Impl;

 private:
  explicit DrafterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

int RunDrafterServer(const DrafterServerOptions& options);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_DRAFTER_DRAFTER_SERVICE_H_
