// specdec-target: the target LLM behind KV-cache handles over gRPC.
#include <CLI/CLI.hpp>

#include "services/common/server_flags.h"
#include "services/target/target_service.h"

int main(int argc, char** argv) {
  specdec::services::TargetServerOptions o;
  CLI::App app{"specdec-target: target model service (prefill, verify, KV-cache handles)"};
  specdec::services::AddListenFlags(app, &o, "SPECDEC_TARGET");
  app.add_option("--model", o.model_dir, "target checkpoint directory (HF layout)")
      ->required()
      ->envname("SPECDEC_TARGET_MODEL");
  app.add_option("--dflash", o.dflash_dir,
                 "DFlash drafter checkpoint to host here: target-hosted drafting (optional)")
      ->envname("SPECDEC_TARGET_DFLASH");
  specdec::services::AddModelServerFlags(app, &o, "SPECDEC_TARGET", "verify pass");
  app.add_option(
         "--batch-prefill-max-rows", o.batch_prefill_max_rows,
         "a prefill joins the batched pass while it stays within this many rows (0 = never)")
      ->check(CLI::Range(0, 1 << 20))
      ->envname("SPECDEC_BATCH_PREFILL_MAX_ROWS");
  app.add_option("--iteration-prefill-max-rows", o.iteration_prefill_max_rows,
                 "prompt rows one scheduler iteration prefills at most; the others wait for the "
                 "next iteration, and a longer prompt runs in parts over several (chunked "
                 "prefill); 0 = every queued prompt whole at once")
      ->check(CLI::Range(0, 1 << 20))
      ->envname("SPECDEC_ITERATION_PREFILL_MAX_ROWS");
  app.add_option("--drain-ms", o.drain_ms, "graceful shutdown budget")->envname("SPECDEC_DRAIN_MS");
  CLI11_PARSE(app, argc, argv);
  return specdec::services::RunTargetServer(o);
}
