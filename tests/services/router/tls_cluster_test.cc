// The router over mTLS to a target that requires client certificates, with TLS on its own port:
// generation works end to end, and a router without a client certificate is refused by the
// target. Certificates are made by openssl in the test (make_test_certs.sh).
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "clients/cpp/client.h"
#include "tests/services/common/test_certs.h"
#include "tests/services/router/cluster_fixture.h"

namespace specdec::services::cluster_testing {
namespace {

std::string F(const std::string& name) {
  return ::specdec::testing_util::TestCertDir("tls_cluster_test_certs") + "/" + name;
}

std::unique_ptr<TargetServer> StartMutualTlsTarget() {
  TargetServerOptions to;
  to.address = "127.0.0.1:0";
  to.metrics_address = "";
  to.model_dir = Checkpoints().target;
  to.threads = 1;
  to.tls = {F("server.pem"), F("server.key"), F("ca.pem")};
  auto t = TargetServer::Start(to);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

RouterServerOptions RouterOver(const TargetServer& target) {
  RouterServerOptions ro;
  ro.address = "127.0.0.1:0";
  ro.metrics_address = "";
  ro.http_address = "";
  ro.target_address = "127.0.0.1:" + std::to_string(target.port());
  ro.connect_timeout_ms = 2000;
  return ro;
}

TEST(TlsClusterTest, TheRouterReachesAMutualTlsTargetAndServesOverTls) {
  auto target = StartMutualTlsTarget();
  ASSERT_NE(target, nullptr);
  RouterServerOptions ro = RouterOver(*target);
  ro.backend_tls = {F("client.pem"), F("client.key"), F("ca.pem")};
  ro.tls = {F("server.pem"), F("server.key"), ""};
  auto router = RouterServer::Start(ro);
  ASSERT_TRUE(router.ok()) << router.status();

  grpc::SslCredentialsOptions ssl;
  std::ifstream ca(F("ca.pem"));
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), std::istreambuf_iterator<char>());
  auto stub = v1::Router::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*router)->port()), grpc::SslCredentials(ssl)));
  v1::GenerateRequest req;
  for (int32_t t : {1, 2, 3}) req.mutable_token_ids()->add_ids(t);
  req.set_max_new_tokens(5);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  int tokens = 0;
  while (reader->Read(&r)) {
    if (r.has_chunk()) tokens += r.chunk().token_ids_size();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 5);

  // The C++ SDK over TLS.
  auto client = Client::Connect("127.0.0.1:" + std::to_string((*router)->port()), "",
                                ClientTls{F("ca.pem"), "", ""});
  ASSERT_TRUE(client.ok()) << client.status();
  auto generated = (*client)->Generate(req);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ(generated->tokens.size(), 5u);
  EXPECT_FALSE(Client::Connect("127.0.0.1:1", "", ClientTls{F("missing.pem"), "", ""}).ok());

  auto plain = v1::Router::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*router)->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext plain_ctx;
  plain_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::RouterInfo info;
  EXPECT_FALSE(plain->GetInfo(&plain_ctx, v1::GetInfoRequest(), &info).ok())
      << "the router's TLS port refuses plaintext";
}

TEST(TlsClusterTest, AMutualTlsTargetRefusesARouterWithoutAClientCertificate) {
  auto target = StartMutualTlsTarget();
  ASSERT_NE(target, nullptr);
  RouterServerOptions ro = RouterOver(*target);
  ro.backend_tls = {"", "", F("ca.pem")};  // TLS, but no client certificate
  auto router = RouterServer::Start(ro);
  ASSERT_FALSE(router.ok());
  EXPECT_EQ(router.status().code(), absl::StatusCode::kUnavailable) << router.status();
  ro.backend_tls = {};  // plaintext
  EXPECT_FALSE(RouterServer::Start(ro).ok());
}

}  // namespace
}  // namespace specdec::services::cluster_testing
