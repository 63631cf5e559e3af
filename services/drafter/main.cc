// specdec-drafter: draft models (DFlash block drafter, small AR draft LM) over gRPC.
#include <CLI/CLI.hpp>

#include "services/common/tls_flags.h"
#include "services/drafter/drafter_service.h"

int main(int argc, char** argv) {
  specdec::services::DrafterServerOptions o;
  CLI::App app{"specdec-drafter: draft model service (DFlash blocks, chains, DySpec trees)"};
  app.add_option("--address", o.address, "gRPC listen address")->envname("SPECDEC_DRAFTER_ADDRESS");
  specdec::services::AddServerTlsFlags(app, &o.tls, "SPECDEC_DRAFTER");
  app.add_option("--metrics-address", o.metrics_address, "/metrics listen address (empty: off)")
      ->envname("SPECDEC_DRAFTER_METRICS_ADDRESS");
  app.add_option("--target", o.target_dir, "target checkpoint (embedding and head for DFlash)")
      ->envname("SPECDEC_TARGET_MODEL");
  app.add_option("--dflash", o.dflash_dir, "DFlash drafter checkpoint")
      ->envname("SPECDEC_DFLASH_MODEL");
  app.add_option("--draft-lm", o.draft_lm_dir, "small AR draft model checkpoint")
      ->envname("SPECDEC_DRAFT_LM_MODEL");
  app.add_option("--dtype", o.dtype, "compute dtype")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->envname("SPECDEC_DRAFTER_DTYPE");
  app.add_option("--device", o.device, "cpu, cuda or cuda:N (a CUDA-enabled libtorch)")
      ->envname("SPECDEC_DRAFTER_DEVICE");
  app.add_option("--replica", o.replica, "replica name (prefix of handles)")
      ->envname("SPECDEC_REPLICA");
  app.add_option("--kv-budget-bytes", o.kv_budget_bytes, "draft cache memory budget")
      ->envname("SPECDEC_KV_BUDGET_BYTES");
  app.add_option("--lease-ms", o.lease_ms, "idle timeout of a handle")->envname("SPECDEC_LEASE_MS");
  app.add_option("--threads", o.threads, "compute threads (0 = all cores)")
      ->envname("SPECDEC_THREADS");
  app.add_option("--kernel-cache-capacity", o.kernel_cache_capacity,
                 "compiled matrix-product kernels kept per oneDNN cache (0 = library default)")
      ->check(CLI::Range(0, 1 << 20))
      ->envname("SPECDEC_KERNEL_CACHE_CAPACITY");
  app.add_option("--max-batch", o.max_batch, "sessions per batched DFlash draft (1 = no batching)")
      ->envname("SPECDEC_MAX_BATCH");
  app.add_option("--batch-wait-max-us", o.batch_wait_max_us,
                 "longest wait for sessions expected back soon before a batched pass (0 = none)")
      ->envname("SPECDEC_BATCH_WAIT_MAX_US");
  app.add_option("--drain-ms", o.drain_ms, "graceful shutdown budget")->envname("SPECDEC_DRAIN_MS");
  CLI11_PARSE(app, argc, argv);
  return specdec::services::RunDrafterServer(o);
}
