// specdec-router: the client-facing Generate API. Orchestrates a request over the target,
// drafter and policy services, streams committed tokens and exports spec-decode metrics.
#ifndef SPECDEC_SERVICES_ROUTER_ROUTER_SERVICE_H_
#define SPECDEC_SERVICES_ROUTER_ROUTER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/metrics_server.h"
#include "services/common/tls.h"

namespace specdec::services {

struct RouterServerOptions {
  std::string address = "127.0.0.1:50050";         // gRPC; port 0 picks a free port
  std::string metrics_address = "127.0.0.1:9090";  // /metrics; empty = do not serve
  // Backends: one host:port or a comma-separated list of replicas of the same models. Requests
  // are spread over the healthy replicas round robin (see ReplicaSet).
  std::string target_address;   // required
  std::string drafter_address;  // optional: speculative methods need it
  // DFLASH* requests on a target replica that hosts a DFlash drafter (specdec-target --dflash,
  // seen in its GetInfo at startup) draft on the target in server-side speculative runs instead
  // of on a drafter service: no round trip per step. false = always use the drafter service.
  bool target_drafting = true;
  std::string policy_address;     // optional: DFLASH_ADAPTIVE's block size
  int health_interval_ms = 1000;  // how often every replica's health service is probed
  // Steps of DFLASH_ADAPTIVE requests without a fixed block size run as plain AR steps when AR
  // steps were measured to decode faster at the current load (LoadAwareSpeculation), learned in
  // epochs as long as a request lasts (the decayed mean lifetime of finished requests), within
  // these bounds: shorter epochs in a closed loop of equal requests see only part of a cycle
  // (its prompts' prefills, or none of them), and adjacent epochs then compare the parts.
  bool load_aware = true;
  int load_aware_epoch_ms = 250;
  int load_aware_max_epoch_ms = 2000;
  // Epochs past the current one that a load-aware server-side run may span while its level keeps
  // the arm (0: every run stops at its epoch's end).
  int load_aware_max_hold_epochs = 4;
  // Load-aware speculative runs on a hosted drafter use the block (at most BlockPilot's) that
  // BlockCostModel predicts decodes fastest at the current load; false: BlockPilot's block.
  bool load_aware_block = true;
  // Admission control (AdmissionQueue): requests served at once (0 = unbounded), requests that
  // may wait for a slot, and how long one may wait before RESOURCE_EXHAUSTED.
  int max_active_requests = 64;
  int max_queued_requests = 256;
  int queue_timeout_ms = 10000;
  // Before serving, one DFLASH_ADAPTIVE request of this many tokens on a made-up prompt measures
  // the passes' costs for the block choice (warmup.h); 0: none. specdec-router's default: 96.
  int warmup_tokens = 0;
  std::string tokenizer_dir;  // tokenizer.json for text prompts (optional)
  // The served model's name: the spec-decode metrics' label, and a name GenerateRequest.model
  // may give (besides the target's ModelInfo.name).
  std::string model_name = "target";
  int default_max_new_tokens = 128;
  int connect_timeout_ms = 5000;  // waiting for the target at startup
  int drain_ms = 2000;
  // The OpenAI-compatible HTTP front (http_front.h): its address (empty = off; port 0 picks a
  // free one), connections served at once, and a request's deadline.
  std::string http_address = "127.0.0.1:8000";
  int http_threads = 128;
  int http_request_timeout_ms = 600000;
  // A Jinja chat template file for /v1/chat/completions, replacing tokenizer_config.json's
  // chat_template (in tokenizer_dir). Without either, chat requests get 400.
  std::string chat_template_path;
  // API keys (api_keys.h): a JSON file of key digests and per-key limits, read again when it
  // changes. Empty: no key is required.
  std::string api_keys_path;
  // Text prompts longer than this are refused before tokenization. 0: the longest text that can
  // still fit the context (MaxPromptBytes).
  size_t max_prompt_bytes = 0;
  // TLS (services/common/tls.h) of the client-facing gRPC port, and of the channels to the
  // target, drafter and policy replicas (ca: the backends' CA; cert and key: the router's client
  // certificate for backends that require one). Empty: plaintext.
  TlsFiles tls;
  TlsFiles backend_tls;
};

// A running router. Start/Shutdown from one thread; the service is thread-safe.
class RouterServer {
 public:
  static absl::StatusOr<std::unique_ptr<RouterServer>> Start(const RouterServerOptions& options);
  ~RouterServer();
  int port() const;
  int metrics_port() const;
  int http_port() const;  // 0 when the HTTP front is off
  prometheus::Registry& registry();
  void Shutdown();

  struct Impl;

 private:
  explicit RouterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

int RunRouterServer(const RouterServerOptions& options);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_ROUTER_SERVICE_H_
