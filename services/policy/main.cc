// specdec-policy: BlockPilot block-size predictions over gRPC.
#include <CLI/CLI.hpp>

#include "services/common/tls_flags.h"
#include "services/policy/policy_service.h"

int main(int argc, char** argv) {
  specdec::services::PolicyServerOptions o;
  CLI::App app{"specdec-policy: BlockPilot block-size policy service"};
  app.add_option("--address", o.address, "gRPC listen address")->envname("SPECDEC_POLICY_ADDRESS");
  specdec::services::AddServerTlsFlags(app, &o.tls, "SPECDEC_POLICY");
  app.add_option("--metrics-address", o.metrics_address, "/metrics listen address (empty: off)")
      ->envname("SPECDEC_POLICY_METRICS_ADDRESS");
  app.add_option("--policy", o.policy_dir, "BlockPilot checkpoint directory")
      ->required()
      ->envname("SPECDEC_POLICY_DIR");
  app.add_option("--drain-ms", o.drain_ms, "graceful shutdown budget")->envname("SPECDEC_DRAIN_MS");
  CLI11_PARSE(app, argc, argv);
  return specdec::services::RunPolicyServer(o);
}
