// TLS for the services' gRPC ports and the router's channels to them: certificates and keys from
// PEM files, re-read when they change. Without files a port or channel is plaintext, which only
// loopback development should use (docs/design.md section 1.10).
#ifndef SPECDEC_SERVICES_COMMON_TLS_H_
#define SPECDEC_SERVICES_COMMON_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace specdec::services {

// PEM files of one side of a connection.
struct TlsFiles {
  std::string cert;  // certificate chain presented to the peer
  std::string key;   // its private key
  // Server: the CA whose client certificates are required (mTLS); empty = no client certificate.
  // Client: the CA that must have signed the server's certificate.
  std::string ca;
  // How often the files are checked for changes (gRPC ports and channels; the router's HTTP front
  // checks at most once a second).
  unsigned refresh_seconds = 60;
};

// Server credentials: plaintext without cert and key; TLS with them; mTLS (a client certificate
// signed by `ca` required and verified) when `ca` is set too. INVALID_ARGUMENT when only one of
// cert and key is given, or a file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& f);

// Channel credentials: plaintext without `ca`; else TLS verifying the server against `ca`, and
// presenting cert and key when given (mTLS). INVALID_ARGUMENT as above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& f);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_TLS_H_
