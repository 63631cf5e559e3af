// specdec-policy: BlockPilot block-size predictions over gRPC.
#include <CLI/CLI.hpp>

#include "services/common/server_flags.h"
#include "services/policy/policy_service.h"

int main(int argc, char** argv) {
  specdec::services::PolicyServerOptions o;
  CLI::App app{"specdec-policy: BlockPilot block-size policy service"};
  specdec::services::AddListenFlags(app, &o, "SPECDEC_POLICY");
  app.add_option("--policy", o.policy_dir, "BlockPilot checkpoint directory")
      ->required()
      ->envname("SPECDEC_POLICY_DIR");
  app.add_option("--drain-ms", o.drain_ms, "graceful shutdown budget")->envname("SPECDEC_DRAIN_MS");
  CLI11_PARSE(app, argc, argv);
  return specdec::services::RunPolicyServer(o);
}
