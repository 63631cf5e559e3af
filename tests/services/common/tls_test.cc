// TLS and mTLS on a real gRPC server with certificates made by openssl in the test
// (make_test_certs.sh): what connects and what is refused.
#include "services/common/tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "services/common/server.h"
#include "tests/services/common/health_check.h"
#include "tests/services/common/test_certs.h"

namespace specdec::services {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static std::string F(const std::string& name) {
    return ::specdec::testing_util::TestCertDir("tls_test_certs") + "/" + name;
  }
  static TlsFiles Server(bool mutual) {
    return {F("server.pem"), F("server.key"), mutual ? F("ca.pem") : ""};
  }
  static TlsFiles Client(const std::string& who) {
    if (who.empty()) return {"", "", F("ca.pem")};
    return {F(who + ".pem"), F(who + ".key"), F("ca.pem")};
  }
  // grpc.health.v1.Health/Check over a channel with `credentials`.
  static grpc::Status Check(int port,
                            const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    return testing_util::HealthCheck(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), credentials), 3000);
  }
  static std::shared_ptr<grpc::ChannelCredentials> Creds(const TlsFiles& f) {
    auto c = MakeChannelCredentials(f);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }
};

TEST_F(TlsTest, TlsServesVerifiedClientsAndRefusesPlaintext) {
  auto server = StartServer("127.0.0.1:0", {}, {}, Server(/*mutual=*/false));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Check(server->port, Creds(Client(""))).ok());
  EXPECT_FALSE(Check(server->port, grpc::InsecureChannelCredentials()).ok());
  // A client trusting another CA refuses the server.
  EXPECT_FALSE(Check(server->port, Creds({"", "", F("other_ca.pem")})).ok());
  server->server->Shutdown();
}

TEST_F(TlsTest, MutualTlsRefusesMissingForeignAndExpiredClientCertificates) {
  auto server = StartServer("127.0.0.1:0", {}, {}, Server(/*mutual=*/true));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Check(server->port, Creds(Client("client"))).ok());
  EXPECT_FALSE(Check(server->port, Creds(Client(""))).ok()) << "no client certificate";
  EXPECT_FALSE(
      Check(server->port, Creds({F("other_client.pem"), F("other_client.key"), F("ca.pem")})).ok())
      << "a client certificate of another CA";
  EXPECT_FALSE(Check(server->port, Creds(Client("expired_client"))).ok())
      << "an expired client certificate";
  EXPECT_FALSE(Check(server->port, grpc::InsecureChannelCredentials()).ok());
  server->server->Shutdown();
}

// Certificate files replaced on disk are served without a restart: a client trusting only the
// other CA is refused until the server's files hold a certificate of that CA.
TEST_F(TlsTest, ReplacedCertificateFilesAreServedWithoutARestart) {
  const std::string cert = F("rotating.pem"), key = F("rotating.key");
  auto copy = [&](const std::string& from) {
    ASSERT_EQ(std::system(("cp '" + F(from + ".pem") + "' '" + cert + "' && cp '" +
                           F(from + ".key") + "' '" + key + "'")
                              .c_str()),
              0);
  };
  copy("server");
  TlsFiles files{cert, key, ""};
  files.refresh_seconds = 1;
  auto server = StartServer("127.0.0.1:0", {}, {}, files);
  ASSERT_TRUE(server.ok()) << server.status();
  const TlsFiles other_ca{"", "", F("other_ca.pem")};
  EXPECT_TRUE(Check(server->port, Creds(Client(""))).ok());
  EXPECT_FALSE(Check(server->port, Creds(other_ca)).ok());
  copy("other_server");
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {  // the files are checked every second
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    served = Check(server->port, Creds(other_ca)).ok();
  }
  EXPECT_TRUE(served) << "the replaced certificate was not served within 5 s";
  EXPECT_FALSE(Check(server->port, Creds(Client(""))).ok()) << "the old certificate is gone";
  server->server->Shutdown();
}

TEST_F(TlsTest, IncompleteOrMissingFilesAreNamed) {
  auto half = MakeServerCredentials({F("server.pem"), "", ""});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = MakeServerCredentials({F("nope.pem"), F("server.key"), ""});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("nope.pem"), std::string::npos);
  EXPECT_EQ(MakeServerCredentials({"", "", F("ca.pem")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeChannelCredentials({F("client.pem"), F("client.key"), ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StartServer("127.0.0.1:0", {}, {}, {F("server.pem"), "", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace specdec::services
