// specdec-target: hosts the target LLM and per-request KV caches behind handles, and serves
// prefill / verify / release / attach over a bidirectional Session stream.
#ifndef SPECDEC_SERVICES_TARGET_TARGET_SERVICE_H_
#define SPECDEC_SERVICES_TARGET_TARGET_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/metrics_server.h"
#include "services/common/tls.h"

namespace specdec::services {

struct TargetServerOptions {
  std::string address = "127.0.0.1:50051";         // gRPC; port 0 picks a free port
  std::string metrics_address = "127.0.0.1:9091";  // /metrics; empty = do not serve
  TlsFiles tls;           // the gRPC port's TLS (services/common/tls.h); empty: plaintext
  std::string model_dir;  // HF checkpoint of the target
  // Optional DFlash drafter checkpoint for this target, hosted in this process: requests that
  // prefill with hosted_draft draft their blocks here (TargetVerify.draft_block_size), so a
  // speculative step needs no round trip to a drafter service. Empty = none.
  std::string dflash_dir;
  std::string dtype = "auto";                  // auto | f32 | bf16
  std::string device = "cpu";                  // cpu | cuda | cuda:N
  std::string replica = "target-0";            // prefix of every handle minted here
  int64_t kv_budget_bytes = int64_t{4} << 30;  // KV-cache memory budget
  int64_t lease_ms = 60000;                    // idle timeout of a handle
  int threads = 0;                             // compute threads, 0 = all cores
  // Entries per oneDNN kernel cache (model::ConfigureKernelCache; 0 = the libraries' 1024).
  int kernel_cache_capacity = 0;
  int drain_ms = 2000;  // graceful shutdown budget
  // Continuous batching: verify operations of up to this many sessions that are queued together
  // run as one batched forward pass (1 = one at a time).
  int max_batch = 32;
  // With max_batch > 1: the longest a batch is held for sessions whose next operation is
  // expected within a quarter of a pass (concurrent requests otherwise fall into lockstep and
  // never share a pass); 0 = never held.
  int batch_wait_max_us = 2000;
  // A prefill joins the batched pass of the operations queued with it while that pass stays
  // within this many rows (prompt tokens plus verified rows); otherwise, or with 0, it runs in a
  // forward pass of its own beside the batch's verify pass. Passes of more rows cost more than
  // their parts on the CPU (measured with specdec-batch-bench --new-prompts).
  int batch_prefill_max_rows = 256;
  // With batch_prefill_max_rows > 0: the prompt rows one scheduler iteration prefills at most
  // (PrefillRows in pass_planner.h); the others wait for the next iteration, first in its queue,
  // and a longer prompt is prefilled in parts over several iterations (chunked prefill). So a
  // burst of new requests, or one long prompt, holds the running requests' steps behind about
  // this many prompt rows per step, not behind all of them, and a burst's first tokens come out
  // one pass apart instead of all after its last prompt. 0: every queued prompt whole, in one
  // iteration. (An iteration of more than max_batch operations runs them as several batches,
  // each with its own budget.)
  int iteration_prefill_max_rows = 256;
};

// A running target server. Start/Shutdown from one thread; the service is thread-safe.
class TargetServer {
 public:
  static absl::StatusOr<std::unique_ptr<TargetServer>> Start(const TargetServerOptions& options);
  ~TargetServer();
  int port() const;
  int metrics_port() const;
  prometheus::Registry& registry();
  size_t handles_in_use() const;
  int64_t kv_bytes_in_use() const;
  void Shutdown();

  struct Impl;

 private:
  explicit TargetServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs a target server until SIGINT/SIGTERM, then drains and stops.
int RunTargetServer(const TargetServerOptions& options);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_TARGET_TARGET_SERVICE_H_
