// The TLS flags every service binary takes (CLI11), written once.
#ifndef SPECDEC_SERVICES_COMMON_TLS_FLAGS_H_
#define SPECDEC_SERVICES_COMMON_TLS_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "services/common/tls.h"

namespace specdec::services {

// --tls-cert, --tls-key, --tls-client-ca (env <PREFIX>_TLS_CERT, ...) for the gRPC port.
inline void AddServerTlsFlags(CLI::App& app, TlsFiles* tls, const std::string& env_prefix) {
  app.add_option("--tls-cert", tls->cert,
                 "PEM certificate chain of the gRPC port, and of the router's HTTP API "
                 "(empty: plaintext)")
      ->envname(env_prefix + "_TLS_CERT");
  app.add_option("--tls-key", tls->key, "PEM private key of --tls-cert")
      ->envname(env_prefix + "_TLS_KEY");
  app.add_option("--tls-client-ca", tls->ca,
                 "PEM CA: clients must present a certificate it signed (mTLS)")
      ->envname(env_prefix + "_TLS_CLIENT_CA");
}

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_TLS_FLAGS_H_
