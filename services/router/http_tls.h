// TLS of the router's HTTP front (docs/design.md section 1.10): the certificate and key of the
// router's --tls-cert and --tls-key, read again when either file changes, and with
// --tls-client-ca a client certificate signed by that CA required (mTLS), as on the gRPC port.
#ifndef SPECDEC_SERVICES_ROUTER_HTTP_TLS_H_
#define SPECDEC_SERVICES_ROUTER_HTTP_TLS_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/tls.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // OpenSSL's SSL

namespace specdec::services {

class HttpTlsContext {
 public:
  // INVALID_ARGUMENT naming the file when only one of cert and key is given, a file cannot be
  // read, or the key does not belong to the certificate.
  static absl::StatusOr<std::unique_ptr<HttpTlsContext>> Create(
      const TlsFiles& files, std::chrono::milliseconds recheck = std::chrono::seconds(1));
  ~HttpTlsContext();

  // Sets up a server context (httplib::SSLServer's set-up callback): TLS 1.2 or later, the client
  // CA when one is configured, and a callback that presents the current certificate at every
  // handshake. False (the server is then not valid) when the client CA cannot be loaded.
  bool Configure(ssl_ctx_st* ctx);
  // How many times the certificate was read again after a change.
  int reloads() const;

  struct Loaded;

 private:
  explicit HttpTlsContext(TlsFiles files, std::chrono::milliseconds recheck);
  // The certificate to present: read again when a file's modification time or size changed
  // (checked at most once per `recheck_`); a change that does not load keeps the last good one.
  std::shared_ptr<const Loaded> Current();
  static int CertificateCallback(ssl_st* ssl, void* self);

  const TlsFiles files_;
  const std::chrono::milliseconds recheck_;
  mutable std::mutex mu_;
  std::shared_ptr<const Loaded> loaded_;
  std::chrono::steady_clock::time_point checked_;
  int reloads_ = 0;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_HTTP_TLS_H_
