// specdec-drafter: draft models (DFlash block drafter, small AR draft LM) over gRPC.
#include <CLI/CLI.hpp>

#include "services/common/server_flags.h"
#include "services/drafter/drafter_service.h"

int main(int argc, char** argv) {
  specdec::services::DrafterServerOptions o;
  CLI::App app{"specdec-drafter: draft model service (DFlash blocks, chains, DySpec trees)"};
  specdec::services::AddListenFlags(app, &o, "SPECDEC_DRAFTER");
  app.add_option("--target", o.target_dir, "target checkpoint (embedding and head for DFlash)")
      ->envname("SPECDEC_TARGET_MODEL");
  app.add_option("--dflash", o.dflash_dir, "DFlash drafter checkpoint")
      ->envname("SPECDEC_DFLASH_MODEL");
  app.add_option("--draft-lm", o.draft_lm_dir, "small AR draft model checkpoint")
      ->envname("SPECDEC_DRAFT_LM_MODEL");
  specdec::services::AddModelServerFlags(app, &o, "SPECDEC_DRAFTER", "DFlash draft");
  app.add_option("--drain-ms", o.drain_ms, "graceful shutdown budget")->envname("SPECDEC_DRAIN_MS");
  CLI11_PARSE(app, argc, argv);
  return specdec::services::RunDrafterServer(o);
}
