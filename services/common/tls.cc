#include "services/common/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <fstream>

#include "absl/strings/str_cat.h"

namespace specdec::services {

namespace {

absl::Status Readable(const std::string& path, const char* what) {
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " ", path));
  return absl::OkStatus();
}

absl::Status Check(const TlsFiles& f) {
  if (f.cert.empty() != f.key.empty()) {
    return absl::InvalidArgumentError("a TLS certificate needs its key and a key its certificate");
  }
  if (absl::Status s = Readable(f.cert, "TLS certificate"); !s.ok()) return s;
  if (absl::Status s = Readable(f.key, "TLS key"); !s.ok()) return s;
  return Readable(f.ca, "TLS CA certificate");
}

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(const TlsFiles& f) {
  using grpc::experimental::FileWatcherCertificateProvider;
  if (f.cert.empty())
    return std::make_shared<FileWatcherCertificateProvider>(f.ca, f.refresh_seconds);
  return std::make_shared<FileWatcherCertificateProvider>(f.key, f.cert, f.ca, f.refresh_seconds);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& f) {
  if (absl::Status s = Check(f); !s.ok()) return s;
  if (f.cert.empty()) {
    if (!f.ca.empty()) {
      return absl::InvalidArgumentError("a client CA needs the server's own certificate and key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::experimental::TlsServerCredentialsOptions options(Provider(f));
  options.watch_identity_key_cert_pairs();
  if (f.ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& f) {
  if (absl::Status s = Check(f); !s.ok()) return s;
  if (f.ca.empty()) {
    if (!f.cert.empty()) {
      return absl::InvalidArgumentError("a client certificate needs the CA of the server's");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(f));
  options.watch_root_certs();
  if (!f.cert.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace specdec::services
