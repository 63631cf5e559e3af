// The flags the service binaries share (CLI11), written once: where a server listens, and how a
// model service (target, drafter) computes and keeps and batches its sessions. Templates over each
// binary's options struct, whose fields carry the same names.
#ifndef SPECDEC_SERVICES_COMMON_SERVER_FLAGS_H_
#define SPECDEC_SERVICES_COMMON_SERVER_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "services/common/tls_flags.h"

namespace specdec::services {

// --address, the TLS flags and --metrics-address (env <PREFIX>_ADDRESS, <PREFIX>_TLS_*,
// <PREFIX>_METRICS_ADDRESS).
template <typename Options>
void AddListenFlags(CLI::App& app, Options* o, const std::string& env_prefix) {
  app.add_option("--address", o->address, "gRPC listen address")->envname(env_prefix + "_ADDRESS");
  AddServerTlsFlags(app, &o->tls, env_prefix);
  app.add_option("--metrics-address", o->metrics_address, "/metrics listen address (empty: off)")
      ->envname(env_prefix + "_METRICS_ADDRESS");
}

// A model service's compute, sessions and batching: --dtype and --device (env <PREFIX>_DTYPE,
// <PREFIX>_DEVICE), then --replica, --kv-budget-bytes, --lease-ms, --threads,
// --kernel-cache-capacity, --max-batch and --batch-wait-max-us (env SPECDEC_REPLICA, ...).
// `batched_pass` names what a batch runs ("verify pass").
template <typename Options>
void AddModelServerFlags(CLI::App& app, Options* o, const std::string& env_prefix,
                         const std::string& batched_pass) {
  app.add_option("--dtype", o->dtype, "compute dtype")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->envname(env_prefix + "_DTYPE");
  app.add_option("--device", o->device, "cpu, cuda or cuda:N (a CUDA-enabled libtorch)")
      ->envname(env_prefix + "_DEVICE");
  app.add_option("--replica", o->replica, "replica name (prefix of handles)")
      ->envname("SPECDEC_REPLICA");
  app.add_option("--kv-budget-bytes", o->kv_budget_bytes, "memory budget of the sessions' caches")
      ->envname("SPECDEC_KV_BUDGET_BYTES");
  app.add_option("--lease-ms", o->lease_ms, "idle timeout of a handle")
      ->envname("SPECDEC_LEASE_MS");
  app.add_option("--threads", o->threads, "compute threads (0 = all cores)")
      ->envname("SPECDEC_THREADS");
  app.add_option("--kernel-cache-capacity", o->kernel_cache_capacity,
                 "compiled matrix-product kernels kept per oneDNN cache (0 = library default)")
      ->check(CLI::Range(0, 1 << 20))
      ->envname("SPECDEC_KERNEL_CACHE_CAPACITY");
  app.add_option("--max-batch", o->max_batch,
                 "sessions per batched " + batched_pass + " (1 = no batching)")
      ->envname("SPECDEC_MAX_BATCH");
  app.add_option("--batch-wait-max-us", o->batch_wait_max_us,
                 "longest wait for sessions expected back soon before a batched pass (0 = none)")
      ->envname("SPECDEC_BATCH_WAIT_MAX_US");
}

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_SERVER_FLAGS_H_
