// specdec::Client: the C++ SDK for the router's Generate API, in streaming-callback and blocking
// forms.
#ifndef SPECDEC_CLIENTS_CPP_CLIENT_H_
#define SPECDEC_CLIENTS_CPP_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "specdec/v1/router.grpc.pb.h"

namespace specdec {

struct GenerateResult {
  std::vector<int32_t> tokens;  // completion token ids
  std::string text;             // completion text when the request asked for return_text
  v1::Summary summary;
};

// PEM files for a TLS connection to the router: the CA that signed its certificate, and for
// mTLS the client's certificate and key. An empty `ca` connects in plaintext.
struct ClientTls {
  std::string ca, cert, key;
};

// Thread-safe: one Client may serve many concurrent calls over its channel.
class Client {
 public:
  // Connects lazily; `address` is "host:port". `api_key` (when the router requires keys) is sent
  // with every Generate call as "authorization: Bearer <key>".
  static std::unique_ptr<Client> Connect(const std::string& address,
                                         const std::string& api_key = "");
  // Over TLS (`tls.ca` set): INVALID_ARGUMENT when a file cannot be read.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         const std::string& api_key,
                                                         const ClientTls& tls);

  // Streams a generation: `on_chunk` runs for every chunk as the target commits tokens (on the
  // calling thread). Returns the final Summary, or the RPC's status (e.g. INVALID_ARGUMENT,
  // UNAVAILABLE, DEADLINE_EXCEEDED after `timeout_ms`).
  absl::StatusOr<v1::Summary> GenerateStream(
      const v1::GenerateRequest& request,
      const std::function<void(const v1::TokenChunk&)>& on_chunk, int timeout_ms = 120000);

  // Blocking form: collects every chunk.
  absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                          int timeout_ms = 120000);

  absl::StatusOr<v1::RouterInfo> Info(int timeout_ms = 10000);

 private:
  Client(std::unique_ptr<v1::Router::Stub> stub, std::string api_key)
      : stub_(std::move(stub)), api_key_(std::move(api_key)) {}
  std::unique_ptr<v1::Router::Stub> stub_;
  std::string api_key_;
};

}  // namespace specdec

#endif  // SPECDEC_CLIENTS_CPP_CLIENT_H_
