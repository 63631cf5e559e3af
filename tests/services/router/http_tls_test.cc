// HTTPS on the router's HTTP front with certificates made by openssl in the test
// (tests/services/common/make_test_certs.sh): TLS and mTLS, what is refused, a certificate
// replaced on disk served without a restart, and bad files named.
#include "services/router/http_tls.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "prometheus/registry.h"
#include "services/router/http_front.h"
#include "tests/services/common/test_certs.h"

namespace specdec::services {
namespace {

class HttpTlsTest : public ::testing::Test {
 protected:
  static std::string F(const std::string& name) {
    return ::specdec::testing_util::TestCertDir("http_tls_certs") + "/" + name;
  }

  // A front that answers /health (no cluster behind it: nothing else is asked here).
  std::unique_ptr<HttpFront> Start(const TlsFiles& tls) {
    HttpFrontOptions o;
    o.address = "127.0.0.1:0";
    o.threads = 4;
    o.tls = tls;
    HttpBackend b;
    b.healthy = [] { return true; };
    b.model_names = [] { return std::vector<std::string>{"m"}; };
    auto front = HttpFront::Start(o, std::move(b), registry_);
    EXPECT_TRUE(front.ok()) << front.status();
    return front.ok() ? *std::move(front) : nullptr;
  }
  // GET /health over HTTPS trusting `ca`, presenting `client` (a name of make_test_certs.sh)
  // when given; the status, or -1 when no response came (refused handshake).
  static int Health(int port, const std::string& ca, const std::string& client = "") {
    std::unique_ptr<httplib::SSLClient> c =
        client.empty() ? std::make_unique<httplib::SSLClient>("127.0.0.1", port)
                       : std::make_unique<httplib::SSLClient>("127.0.0.1", port, F(client + ".pem"),
                                                              F(client + ".key"));
    c->set_ca_cert_path(F(ca + ".pem").c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(3, 0);
    auto r = c->Get("/health");
    return r ? r->status : -1;
  }
  static void Copy(const std::string& from, const std::string& to) {
    ASSERT_EQ(std::system(("cp '" + F(from + ".pem") + "' '" + F(to + ".pem") + "' && cp '" +
                           F(from + ".key") + "' '" + F(to + ".key") + "'")
                              .c_str()),
              0);
  }

  prometheus::Registry registry_;
};

TEST_F(HttpTlsTest, HttpsServesVerifiedClientsAndRefusesPlaintext) {
  auto front = Start({F("server.pem"), F("server.key"), ""});
  ASSERT_NE(front, nullptr);
  EXPECT_EQ(Health(front->port(), "ca"), 200);
  EXPECT_EQ(Health(front->port(), "other_ca"), -1) << "a client trusting another CA refuses it";
  httplib::Client plain("127.0.0.1", front->port());
  plain.set_read_timeout(3, 0);
  auto r = plain.Get("/health");
  EXPECT_TRUE(!r || r->status != 200) << "plaintext HTTP was answered";
}

TEST_F(HttpTlsTest, MutualTlsRefusesMissingForeignAndExpiredClientCertificates) {
  auto front = Start({F("server.pem"), F("server.key"), F("ca.pem")});
  ASSERT_NE(front, nullptr);
  EXPECT_EQ(Health(front->port(), "ca", "client"), 200);
  EXPECT_EQ(Health(front->port(), "ca"), -1) << "no client certificate";
  EXPECT_EQ(Health(front->port(), "ca", "other_client"), -1) << "a certificate of another CA";
  EXPECT_EQ(Health(front->port(), "ca", "expired_client"), -1) << "an expired certificate";
}

TEST_F(HttpTlsTest, AReplacedCertificateIsServedWithoutARestart) {
  Copy("server", "http_rotating");
  auto front = Start({F("http_rotating.pem"), F("http_rotating.key"), ""});
  ASSERT_NE(front, nullptr);
  EXPECT_EQ(Health(front->port(), "ca"), 200);
  EXPECT_EQ(Health(front->port(), "other_ca"), -1);
  Copy("other_server", "http_rotating");
  int status = -1;
  for (int i = 0; i < 30 && status != 200; ++i) {  // the files are checked once a second
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = Health(front->port(), "other_ca");
  }
  EXPECT_EQ(status, 200) << "the replaced certificate was not served within 3 s";
  EXPECT_EQ(Health(front->port(), "ca"), -1) << "the old certificate is gone";
}

TEST_F(HttpTlsTest, BadFilesAreNamed) {
  auto half = HttpTlsContext::Create({F("server.pem"), "", ""});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = HttpTlsContext::Create({F("nope.pem"), F("server.key"), ""});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("nope.pem"), std::string::npos);
  auto mismatched = HttpTlsContext::Create({F("server.pem"), F("client.key"), ""});
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatched.status().message().find("does not belong"), std::string::npos);
  auto not_pem = HttpTlsContext::Create({F("server.key"), F("server.key"), ""});
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument);
  HttpFrontOptions o;
  o.address = "127.0.0.1:0";
  o.tls = {F("server.pem"), F("server.key"), F("nope_ca.pem")};
  EXPECT_EQ(HttpFront::Start(o, HttpBackend{}, registry_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace specdec::services
