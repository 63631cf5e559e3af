// specdec-router: the client-facing Generate API over the target, drafter and policy services.
#include <CLI/CLI.hpp>

#include "common/engine/warm_up.h"
#include "services/common/log.h"
#include "services/common/server_flags.h"
#include "services/router/router_service.h"

int main(int argc, char** argv) {
  specdec::services::RouterServerOptions o;
  CLI::App app{"specdec-router: request orchestration, token streaming and metrics"};
  specdec::services::AddListenFlags(app, &o, "SPECDEC_ROUTER");
  app.add_option("--backend-tls-ca", o.backend_tls.ca,
                 "PEM CA that signed the backends' certificates (empty: plaintext to backends)")
      ->envname("SPECDEC_BACKEND_TLS_CA");
  app.add_option("--backend-tls-cert", o.backend_tls.cert,
                 "PEM client certificate the router presents to backends (mTLS)")
      ->envname("SPECDEC_BACKEND_TLS_CERT");
  app.add_option("--backend-tls-key", o.backend_tls.key, "PEM key of --backend-tls-cert")
      ->envname("SPECDEC_BACKEND_TLS_KEY");
  app.add_option("--target", o.target_address,
                 "target service address, or a comma-separated list of replicas")
      ->required()
      ->envname("SPECDEC_TARGET_ENDPOINT");
  app.add_option("--drafter", o.drafter_address, "drafter service address(es), comma-separated")
      ->envname("SPECDEC_DRAFTER_ENDPOINT");
  app.add_option("--target-drafting", o.target_drafting,
                 "DFlash requests draft on a target replica that hosts a drafter (server-side "
                 "speculative runs) instead of on the drafter service")
      ->envname("SPECDEC_TARGET_DRAFTING");
  app.add_option("--policy", o.policy_address, "policy service address(es), comma-separated")
      ->envname("SPECDEC_POLICY_ENDPOINT");
  app.add_option("--tokenizer", o.tokenizer_dir, "directory with tokenizer.json (text prompts)")
      ->envname("SPECDEC_TOKENIZER");
  app.add_option("--model-name", o.model_name,
                 "the served model's name: metrics label, and accepted in GenerateRequest.model")
      ->envname("SPECDEC_MODEL_NAME");
  app.add_option("--default-max-new-tokens", o.default_max_new_tokens, "when a request sets 0");
  o.warmup_tokens = specdec::engine::kDefaultWarmUpTokens;
  app.add_option("--warmup-tokens", o.warmup_tokens,
                 "before serving, one DFLASH_ADAPTIVE request of this many tokens measures the "
                 "passes' costs for the block choice (0: none)")
      ->envname("SPECDEC_WARMUP_TOKENS");
  app.add_option("--connect-timeout-ms", o.connect_timeout_ms, "wait for the target at startup");
  app.add_option("--load-aware", o.load_aware,
                 "DFLASH_ADAPTIVE steps may run as AR when AR measures faster at the current load")
      ->envname("SPECDEC_LOAD_AWARE");
  app.add_option("--max-active-requests", o.max_active_requests,
                 "requests served at once; later ones queue (0 = unbounded)")
      ->envname("SPECDEC_MAX_ACTIVE_REQUESTS");
  app.add_option("--max-queued-requests", o.max_queued_requests,
                 "requests that may wait for admission; beyond it RESOURCE_EXHAUSTED at once")
      ->envname("SPECDEC_MAX_QUEUED_REQUESTS");
  app.add_option("--queue-timeout-ms", o.queue_timeout_ms,
                 "longest wait for admission before RESOURCE_EXHAUSTED")
      ->envname("SPECDEC_QUEUE_TIMEOUT_MS");
  app.add_option("--load-aware-epoch-ms", o.load_aware_epoch_ms,
                 "shortest epoch in which every load-aware step takes one arm")
      ->envname("SPECDEC_LOAD_AWARE_EPOCH_MS");
  app.add_option("--load-aware-max-epoch-ms", o.load_aware_max_epoch_ms,
                 "epochs last as long as a request does (the mean lifetime of finished "
                 "requests), from --load-aware-epoch-ms up to this")
      ->envname("SPECDEC_LOAD_AWARE_MAX_EPOCH_MS");
  app.add_option("--load-aware-max-hold-epochs", o.load_aware_max_hold_epochs,
                 "epochs a load-aware run may span while its arm holds (past the current "
                 "one when its arm changes then, else from the run's start)")
      ->envname("SPECDEC_LOAD_AWARE_MAX_HOLD_EPOCHS");
  app.add_option("--load-aware-block", o.load_aware_block,
                 "load-aware speculative runs use the block a model of measured step costs "
                 "predicts fastest at the current load (at most BlockPilot's)")
      ->envname("SPECDEC_LOAD_AWARE_BLOCK");
  app.add_option("--health-interval-ms", o.health_interval_ms, "replica health probe period")
      ->envname("SPECDEC_HEALTH_INTERVAL_MS");
  app.add_option("--drain-ms", o.drain_ms, "graceful shutdown budget")->envname("SPECDEC_DRAIN_MS");
  app.add_option("--http-address", o.http_address,
                 "OpenAI-compatible HTTP API listen address (empty: off)")
      ->envname("SPECDEC_ROUTER_HTTP_ADDRESS");
  app.add_option("--http-threads", o.http_threads, "HTTP connections served at once")
      ->envname("SPECDEC_ROUTER_HTTP_THREADS");
  app.add_option("--http-request-timeout-ms", o.http_request_timeout_ms,
                 "an HTTP request's deadline (a client's X-Request-Timeout-Ms may shorten it)")
      ->envname("SPECDEC_ROUTER_HTTP_REQUEST_TIMEOUT_MS");
  app.add_option("--chat-template", o.chat_template_path,
                 "Jinja chat template file for /v1/chat/completions (default: the tokenizer's "
                 "tokenizer_config.json chat_template)")
      ->envname("SPECDEC_CHAT_TEMPLATE");
  app.add_option("--api-keys", o.api_keys_path,
                 "JSON file of API key digests and per-key limits (empty: no key required); "
                 "re-read when it changes")
      ->envname("SPECDEC_API_KEYS");
  app.add_option("--max-prompt-bytes", o.max_prompt_bytes,
                 "text prompts longer than this are refused before tokenization (0: the longest "
                 "text that can fit the model's context)")
      ->envname("SPECDEC_MAX_PROMPT_BYTES");
  std::string log_level = "info";
  app.add_option("--log-level", log_level,
                 "info: a line per request and per backend failure; warning: failures only; "
                 "error: none")
      ->check(CLI::IsMember({"error", "warning", "info"}))
      ->envname("SPECDEC_LOG_LEVEL");
  CLI11_PARSE(app, argc, argv);
  specdec::services::SetLogLevel(*specdec::services::ParseLogLevel(log_level));
  return specdec::services::RunRouterServer(o);
}
