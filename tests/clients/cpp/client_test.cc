// specdec::Client against a scripted in-process Router (a fake: only the client is under test):
// a call refused with UNAVAILABLE before any answer is retried; one that fails after tokens
// arrived is not, so no token is ever delivered twice.
#include "clients/cpp/client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <memory>
#include <string>

#include "specdec/v1/router.grpc.pb.h"

namespace specdec {
namespace {

// Fails the first `refusals` calls with UNAVAILABLE before answering anything; later calls stream
// one chunk, then (when `fail_after_chunk`) UNAVAILABLE, else a summary.
class ScriptedRouter final : public v1::Router::Service {
 public:
  ScriptedRouter(int refusals, bool fail_after_chunk)
      : refusals_(refusals), fail_after_chunk_(fail_after_chunk) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest*,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    auto auth = ctx->client_metadata().find("authorization");
    if (auth != ctx->client_metadata().end()) {
      std::lock_guard<std::mutex> lock(mu_);
      authorization_ = std::string(auth->second.data(), auth->second.size());
    }
    if (calls_.fetch_add(1) < refusals_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection recycled");
    }
    v1::GenerateResponse chunk;
    chunk.mutable_chunk()->add_token_ids(7);
    writer->Write(chunk);
    if (fail_after_chunk_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "target lost");
    v1::GenerateResponse summary;
    summary.mutable_summary()->mutable_usage()->set_completion_tokens(1);
    writer->Write(summary);
    return grpc::Status::OK;
  }
  int calls() const { return calls_.load(); }
  std::string authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorization_;
  }

 private:
  const int refusals_;
  const bool fail_after_chunk_;
  std::atomic<int> calls_{0};
  std::mutex mu_;
  std::string authorization_;  // of the last call
};

struct Fixture {
  explicit Fixture(ScriptedRouter* service) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service);
    server = b.BuildAndStart();
  }
  ~Fixture() { server->Shutdown(); }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

TEST(ClientTest, AnApiKeyTravelsAsBearerMetadata) {
  ScriptedRouter router(0, false);
  Fixture f(&router);
  auto anonymous = Client::Connect("127.0.0.1:" + std::to_string(f.port));
  ASSERT_TRUE(anonymous->Generate(v1::GenerateRequest()).ok());
  EXPECT_EQ(router.authorization(), "");
  auto keyed = Client::Connect("127.0.0.1:" + std::to_string(f.port), "sk-test");
  ASSERT_TRUE(keyed->Generate(v1::GenerateRequest()).ok());
  EXPECT_EQ(router.authorization(), "Bearer sk-test");
}

TEST(ClientTest, RetriesACallRefusedBeforeAnyAnswer) {
  ScriptedRouter router(/*refusals=*/2, /*fail_after_chunk=*/false);
  Fixture f(&router);
  auto client = Client::Connect("127.0.0.1:" + std::to_string(f.port));
  int tokens = 0;
  auto s = client->GenerateStream(
      v1::GenerateRequest(), [&](const v1::TokenChunk& c) { tokens += c.token_ids_size(); }, 10000);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(router.calls(), 3);
  EXPECT_EQ(tokens, 1);
}

TEST(ClientTest, GivesUpAfterThreeAttempts) {
  ScriptedRouter router(/*refusals=*/5, /*fail_after_chunk=*/false);
  Fixture f(&router);
  auto client = Client::Connect("127.0.0.1:" + std::to_string(f.port));
  auto s = client->GenerateStream(v1::GenerateRequest(), nullptr, 10000);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(router.calls(), 3);
}

TEST(ClientTest, NeverRetriesOnceTokensArrived) {
  ScriptedRouter router(/*refusals=*/0, /*fail_after_chunk=*/true);
  Fixture f(&router);
  auto client = Client::Connect("127.0.0.1:" + std::to_string(f.port));
  int tokens = 0;
  auto s = client->GenerateStream(
      v1::GenerateRequest(), [&](const v1::TokenChunk& c) { tokens += c.token_ids_size(); }, 10000);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(router.calls(), 1);
  EXPECT_EQ(tokens, 1);
}

}  // namespace
}  // namespace specdec
