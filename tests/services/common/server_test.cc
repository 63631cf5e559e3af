// StartServer's connection limits: read from the environment, and applied to real connections.
#include "services/common/server.h"

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/services/common/health_check.h"

namespace specdec::services {
namespace {

class ServerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {"SPECDEC_MAX_STREAMS_PER_CONNECTION", "SPECDEC_KEEPALIVE_MS",
                          "SPECDEC_MAX_CONNECTION_IDLE_MS"}) {
      unsetenv(v);
    }
  }
  // grpc.health.v1.Health/Check of the server, on `channel`.
  static grpc::Status Check(const std::shared_ptr<grpc::Channel>& channel, int timeout_ms) {
    return testing_util::HealthCheck(channel, timeout_ms);
  }
};

TEST_F(ServerTest, LimitsComeFromTheEnvironmentAndBadValuesAreNamed) {
  auto defaults = ConnectionLimitsFromEnv();
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_streams_per_connection, 1024);
  EXPECT_EQ(defaults->keepalive_ms, 60000);
  setenv("SPECDEC_KEEPALIVE_MS", "5000", 1);
  setenv("SPECDEC_MAX_CONNECTION_IDLE_MS", "0", 1);
  auto set = ConnectionLimitsFromEnv();
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->keepalive_ms, 5000);
  EXPECT_EQ(set->max_connection_idle_ms, 0);
  setenv("SPECDEC_MAX_STREAMS_PER_CONNECTION", "many", 1);
  auto bad = ConnectionLimitsFromEnv();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("SPECDEC_MAX_STREAMS_PER_CONNECTION"), std::string::npos);
  EXPECT_EQ(StartServer("127.0.0.1:0", {}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ServerTest, AConnectionServesAtMostItsStreamLimitAtOnce) {
  setenv("SPECDEC_MAX_STREAMS_PER_CONNECTION", "1", 1);
  auto server = StartServer("127.0.0.1:0", {}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(Check(channel, 5000).ok());
  // A health Watch holds the connection's one stream open...
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext watch_ctx;
  auto watch = stub.PrepareCall(&watch_ctx, "/grpc.health.v1.Health/Watch", &cq);
  void* tag;
  bool ok;
  watch->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Slice empty(std::string(""));
  grpc::ByteBuffer request(&empty, 1), response;
  watch->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  watch->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);  // the first status: the stream is open
  // ...so a second call on the same connection waits for it.
  EXPECT_EQ(Check(channel, 300).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  watch_ctx.TryCancel();
  grpc::Status finish;
  watch->Finish(&finish, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  EXPECT_TRUE(Check(channel, 5000).ok());
  server->server->Shutdown();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ServerTest, StopServerDrainsWaitsAndReleasesTheServer) {
  auto server = StartServer("127.0.0.1:0", {}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(Check(channel, 5000).ok());
  StopServer(*server, 100);
  EXPECT_EQ(server->server, nullptr);
  EXPECT_FALSE(Check(channel, 1000).ok());  // nothing listens any more
  StopServer(*server, 100);                 // a stopped server: nothing to do
  EXPECT_EQ(server->server, nullptr);
}

}  // namespace
}  // namespace specdec::services
