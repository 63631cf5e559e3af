#include "services/router/http_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/common/log.h"

namespace specdec::services {

// A certificate chain and its key, with the files' identity when they were read.
struct HttpTlsContext::Loaded {
  X509* leaf = nullptr;
  STACK_OF(X509) * chain = nullptr;  // certificates after the leaf
  EVP_PKEY* key = nullptr;
  struct timespec cert_mtime {
  }, key_mtime{};
  off_t cert_size = 0, key_size = 0;

  ~Loaded() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

bool SameStat(const struct stat& st, const struct timespec& mtime, off_t size) {
  return st.st_mtim.tv_sec == mtime.tv_sec && st.st_mtim.tv_nsec == mtime.tv_nsec &&
         st.st_size == size;
}

absl::StatusOr<std::shared_ptr<const HttpTlsContext::Loaded>> Load(const TlsFiles& f) {
  auto out = std::make_shared<HttpTlsContext::Loaded>();
  struct stat cs {
  }, ks{};
  if (stat(f.cert.c_str(), &cs) != 0 || stat(f.key.c_str(), &ks) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the TLS certificate '", f.cert, "' or its key '", f.key, "'"));
  }
  out->cert_mtime = cs.st_mtim;
  out->key_mtime = ks.st_mtim;
  out->cert_size = cs.st_size;
  out->key_size = ks.st_size;
  FILE* cf = std::fopen(f.cert.c_str(), "r");
  if (cf == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot open '", f.cert, "'"));
  out->leaf = PEM_read_X509(cf, nullptr, nullptr, nullptr);
  out->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_X509(cf, nullptr, nullptr, nullptr))
    sk_X509_push(out->chain, extra);
  ERR_clear_error();  // the loop ends at the end of the file
  std::fclose(cf);
  if (out->leaf == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", f.cert, "' holds no PEM certificate (--tls-cert)"));
  }
  FILE* kf = std::fopen(f.key.c_str(), "r");
  if (kf == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot open '", f.key, "'"));
  out->key = PEM_read_PrivateKey(kf, nullptr, nullptr, nullptr);
  std::fclose(kf);
  if (out->key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", f.key, "' holds no PEM private key (--tls-key): ", OpenSslError()));
  }
  if (X509_check_private_key(out->leaf, out->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("the key '", f.key, "' does not belong to the certificate '", f.cert, "'"));
  }
  return out;
}

}  // namespace

HttpTlsContext::HttpTlsContext(TlsFiles files, std::chrono::milliseconds recheck)
    : files_(std::move(files)), recheck_(recheck) {}

HttpTlsContext::~HttpTlsContext() = default;

absl::StatusOr<std::unique_ptr<HttpTlsContext>> HttpTlsContext::Create(
    const TlsFiles& files, std::chrono::milliseconds recheck) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  auto loaded = Load(files);
  if (!loaded.ok()) return loaded.status();
  std::unique_ptr<HttpTlsContext> ctx(new HttpTlsContext(files, recheck));
  ctx->loaded_ = *std::move(loaded);
  ctx->checked_ = std::chrono::steady_clock::now();
  return ctx;
}

std::shared_ptr<const HttpTlsContext::Loaded> HttpTlsContext::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_ < recheck_) return loaded_;
  checked_ = now;
  struct stat cs {
  }, ks{};
  if (stat(files_.cert.c_str(), &cs) != 0 || stat(files_.key.c_str(), &ks) != 0 ||
      (SameStat(cs, loaded_->cert_mtime, loaded_->cert_size) &&
       SameStat(ks, loaded_->key_mtime, loaded_->key_size))) {
    return loaded_;
  }
  auto fresh = Load(files_);
  if (!fresh.ok()) {  // for example a certificate written before its key: try again later
    Log(LogLevel::kWarning, "http_tls_reload_failed",
        absl::StrCat(" cert=", LogValue(files_.cert), " error=", LogValue(fresh.status().message()),
                     " action=\"keeping the current certificate\""));
    return loaded_;
  }
  loaded_ = *std::move(fresh);
  ++reloads_;
  Log(LogLevel::kInfo, "http_tls_reloaded", absl::StrCat(" cert=", LogValue(files_.cert)));
  return loaded_;
}

int HttpTlsContext::reloads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reloads_;
}

int HttpTlsContext::CertificateCallback(ssl_st* ssl, void* self) {
  const std::shared_ptr<const Loaded> c = static_cast<HttpTlsContext*>(self)->Current();
  // The SSL object takes its own references.
  return SSL_use_certificate(ssl, c->leaf) == 1 && SSL_use_PrivateKey(ssl, c->key) == 1 &&
                 SSL_set1_chain(ssl, c->chain) == 1
             ? 1
             : 0;
}

bool HttpTlsContext::Configure(ssl_ctx_st* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cert_cb(ctx, &HttpTlsContext::CertificateCallback, this);
  if (files_.ca.empty()) return true;
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files_.ca.c_str());
  if (names == nullptr || SSL_CTX_load_verify_locations(ctx, files_.ca.c_str(), nullptr) != 1) {
    Log(LogLevel::kError, "http_tls_client_ca",
        absl::StrCat(" ca=", LogValue(files_.ca), " error=", LogValue(OpenSslError())));
    sk_X509_NAME_pop_free(names, X509_NAME_free);
    return false;
  }
  SSL_CTX_set_client_CA_list(ctx, names);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return true;
}

}  // namespace specdec::services
