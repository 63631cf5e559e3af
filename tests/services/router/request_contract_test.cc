// Every field of GenerateRequest honoured or refused up front, through the real cluster: stop
// strings and stop tokens end the output the same way in the cluster and in process, the model
// name is checked, request ids are minted, invalid UTF-8 is refused by name, trees fit the
// context, and GetInfo and the health service describe every service.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include "common/engine/decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "specdec/v1/target.grpc.pb.h"
#include "tests/common/tokenizer/test_util.h"
#include "tests/services/router/cluster_fixture.h"

namespace specdec::services {
namespace {

using cluster_testing::Checkpoints;
using cluster_testing::ClusterTest;

// A byte-level tokenizer without merges whose id t decodes to the byte (t + first_byte) mod 256:
// with first_byte 0 the checkpoints' 67 ids decode to bytes 0x00..0x42; with 0x80, to bytes
// 0x80..0xC2, continuation bytes and leads that form almost no UTF-8 character.
std::string WriteByteTokenizer(int first_byte = 0) {
  const std::string dir =
      std::filesystem::temp_directory_path() /
      ("specdec_bytes_tok_" + std::to_string(first_byte) + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  testing_util::RemoveAtExit(dir);
  tokenizer::testing::ByteLevelSpec spec;
  spec.pre_tokenizer = tokenizer::testing::Gpt2PreTokenizer();
  nlohmann::json json = nlohmann::json::parse(tokenizer::testing::BuildByteLevelJson(spec));
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[tokenizer::testing::Gpt2ByteChar(b)] = (b - first_byte + 256) % 256;
  }
  json["model"]["vocab"] = vocab;
  std::ofstream(dir + "/tokenizer.json") << json.dump();
  return dir;
}

// The standard health service's answer for `service` at `address`, as raw bytes of the
// HealthCheckResponse ("\x08\x01" is SERVING); empty on an RPC error.
std::string HealthCheck(const std::string& address, const std::string& service) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::string request;
  if (!service.empty()) {  // HealthCheckRequest{service}: field 1, length-delimited
    request = std::string("\x0a") + static_cast<char>(service.size()) + service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  if (!done.get_future().get().ok()) return "";
  std::vector<grpc::Slice> slices;
  if (!resp.Dump(&slices).ok()) return "";
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

class RequestContractTest : public ClusterTest {
 protected:
  void SetUp() override {
    tokenizer_dir_ = WriteByteTokenizer();
    ClusterTest::SetUp();
    auto tok = tokenizer::Tokenizer::FromFile(tokenizer_dir_ + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
    auto target = model::Transformer::Load(Checkpoints().target);
    ASSERT_TRUE(target.ok());
    target_model_ = *std::move(target);
  }
  engine::EngineModels Models() const {
    engine::EngineModels em{target_model_.get()};
    em.tokenizer = tokenizer_.get();
    return em;
  }
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<model::Transformer> target_model_;
};

TEST_F(RequestContractTest, StopStringsEndTheTextInTheClusterAsInProcess) {
  const std::vector<int32_t> prompt = {7, 8, 9, 10};
  engine::DecodeOptions ar;
  ar.max_new_tokens = 60;
  auto free_run = engine::Decode(Models(), prompt, ar);
  ASSERT_TRUE(free_run.ok());
  // A stop string made of two bytes of the free run's text, from its 20th token on.
  const std::string text(free_run->tokens.begin(), free_run->tokens.end());
  const std::string stop = text.substr(20, 2);
  const size_t at = text.find(stop);
  ASSERT_NE(at, std::string::npos);
  engine::DecodeOptions o = ar;
  o.stop_strings = {stop};
  auto local = engine::Decode(Models(), prompt, o);
  ASSERT_TRUE(local.ok()) << local.status();
  const std::vector<int32_t> want(free_run->tokens.begin(), free_run->tokens.begin() + at + 2);
  EXPECT_EQ(local->tokens, want);
  EXPECT_EQ(local->text, text.substr(0, at));
  EXPECT_EQ(local->stop_string, stop);
  for (v1::Method m : {v1::AR, v1::DRAFT_CHAIN, v1::DFLASH}) {
    v1::GenerateRequest req = Request(prompt, m, 60);
    req.add_stop(stop);
    req.set_return_text(true);
    Result r = Generate(req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, want) << v1::Method_Name(m);
    EXPECT_EQ(r.summary.finish_reason(), v1::STOP);
    EXPECT_EQ(r.summary.stop_string(), stop);
    EXPECT_EQ(r.summary.stop_token_id(), -1);
  }
  // The streamed text, chunk by chunk, is the text before the match.
  grpc::ClientContext ctx;
  v1::GenerateRequest req = Request(prompt, v1::DRAFT_CHAIN, 60);
  req.add_stop(stop);
  req.set_return_text(true);
  auto reader = stub_->Generate(&ctx, req);
  std::string streamed;
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_chunk()) streamed += resp.chunk().text();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(streamed, text.substr(0, at));
}

TEST_F(RequestContractTest, AStopTokenEndsTheOutputBeforeItInTheClusterAsInProcess) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  engine::DecodeOptions ar;
  ar.max_new_tokens = 40;
  auto free_run = engine::Decode(Models(), prompt, ar);
  ASSERT_TRUE(free_run.ok());
  const int32_t stop = free_run->tokens[12];
  engine::DecodeOptions o = ar;
  o.stop_token_ids = {stop};
  auto local = engine::Decode(Models(), prompt, o);
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(local->stopped);
  for (v1::Method m : {v1::AR, v1::DRAFT_CHAIN, v1::DYSPEC_TREE, v1::DFLASH}) {
    v1::GenerateRequest req = Request(prompt, m, 40);
    req.add_stop_token_ids(stop);
    Result r = Generate(req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, local->tokens) << v1::Method_Name(m);
    EXPECT_EQ(r.summary.finish_reason(), v1::STOP);
    EXPECT_EQ(r.summary.stop_token_id(), stop);
  }
}

TEST_F(RequestContractTest, StopStringsWithoutATokenizerAreRefused) {
  tokenizer_dir_.clear();
  StartRouter(250);
  v1::GenerateRequest req = Request({1, 2, 3}, v1::AR, 5);
  req.add_stop("x");
  Result r = Generate(req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(r.status.error_message().find("tokenizer"), std::string::npos);
}

TEST_F(RequestContractTest, TheModelNameIsChecked) {
  v1::GenerateRequest req = Request({1, 2, 3}, v1::AR, 5);
  req.set_model("no-such-model");
  Result r = Generate(req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(r.status.error_message().find("no-such-model"), std::string::npos);
  req.set_model("target");
  EXPECT_TRUE(Generate(req).status.ok());
}

TEST_F(RequestContractTest, RequestIdsAreEchoedOrMinted) {
  v1::GenerateRequest req = Request({1, 2, 3}, v1::AR, 3);
  req.set_request_id("client-7");
  EXPECT_EQ(Generate(req).summary.request_id(), "client-7");
  req.clear_request_id();
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.insert(Generate(req).summary.request_id());
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_FALSE(ids.contains(""));
}

TEST_F(RequestContractTest, InvalidUtf8IsRefusedByName) {
  const std::string bad = "ab\xff\xfe";
  v1::GenerateRequest text;
  text.set_text(bad);
  text.set_max_new_tokens(3);
  v1::GenerateRequest id = Request({1, 2}, v1::AR, 3);
  id.set_request_id(bad);
  v1::GenerateRequest stop = Request({1, 2}, v1::AR, 3);
  stop.add_stop(bad);
  for (auto [req, field] :
       {std::pair{text, "text"}, std::pair{id, "request_id"}, std::pair{stop, "stop[0]"}}) {
    Result r = Generate(req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(r.status.error_message().find(field), std::string::npos)
        << field << ": " << r.status.error_message();
  }
}

TEST_F(RequestContractTest, NanTreeThresholdIsRefused) {
  v1::GenerateRequest req = Request({1, 2, 3}, v1::DYSPEC_TREE, 5);
  req.set_tree_threshold(std::nanf(""));
  Result r = Generate(req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("tree_threshold"), std::string::npos);
}

TEST_F(RequestContractTest, TreesNearTheEndOfTheContextFitAndEqualAr) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 470; ++i) prompt.push_back((i * 11) % 60);
  engine::DecodeOptions ar;
  ar.max_new_tokens = 42;  // 470 + 42 = the whole context of 512
  auto want = engine::Decode(Models(), prompt, ar);
  ASSERT_TRUE(want.ok());
  v1::GenerateRequest req = Request(prompt, v1::DYSPEC_TREE, 42);
  req.set_tree_budget(64);
  Result r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, want->tokens);
}

TEST_F(RequestContractTest, EchoSendsThePromptFirst) {
  v1::GenerateRequest req = Request({5, 6, 7}, v1::AR, 4);
  req.set_echo(true);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, req);
  v1::GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first));
  ASSERT_TRUE(first.has_chunk());
  EXPECT_TRUE(first.chunk().prompt());
  EXPECT_EQ(
      std::vector<int32_t>(first.chunk().token_ids().begin(), first.chunk().token_ids().end()),
      (std::vector<int32_t>{5, 6, 7}));
  v1::GenerateResponse resp;
  int generated = 0;
  while (reader->Read(&resp)) {
    if (resp.has_chunk()) generated += resp.chunk().token_ids_size();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(generated, 4);
}

TEST_F(RequestContractTest, GetInfoAndHealthDescribeEveryService) {
  grpc::ClientContext ctx;
  v1::RouterInfo info;
  ASSERT_TRUE(stub_->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.target().vocab_size(), 67);
  EXPECT_GT(info.drafter().draft_models_size(), 0);
  EXPECT_EQ(info.policy().block_size(), 5);
  std::set<int> methods(info.methods().begin(), info.methods().end());
  EXPECT_TRUE(methods.contains(v1::DFLASH_ADAPTIVE));
  EXPECT_TRUE(methods.contains(v1::NGRAM));
  for (auto [port, service] : {std::pair{router_->port(), "specdec.v1.Router"},
                               std::pair{target_->port(), "specdec.v1.Target"},
                               std::pair{drafter_->port(), "specdec.v1.Drafter"},
                               std::pair{policy_->port(), "specdec.v1.Policy"}}) {
    for (const std::string& name : {std::string(service), std::string()}) {
      EXPECT_EQ(HealthCheck(Addr(port), name), std::string("\x08\x01", 2))
          << service << " '" << name << "'";
    }
    // A name no service has is NOT_FOUND (no answer).
    EXPECT_EQ(HealthCheck(Addr(port), "specdec.v1.Nothing"), "");
  }
  // Every model's revision: 16 hex digits of its weights' content, distinct per checkpoint.
  auto hex16 = [](const std::string& r) {
    return r.size() == 16 && r.find_first_not_of("0123456789abcdef") == std::string::npos;
  };
  std::set<std::string> revisions = {info.target().revision(), info.policy().revision()};
  EXPECT_TRUE(hex16(info.target().revision())) << info.target().revision();
  EXPECT_TRUE(hex16(info.policy().revision())) << info.policy().revision();
  for (const v1::DraftModelInfo& dm : info.drafter().draft_models()) {
    EXPECT_TRUE(hex16(dm.model().revision())) << dm.model().name();
    revisions.insert(dm.model().revision());
  }
  EXPECT_EQ(revisions.size(), 2u + info.drafter().draft_models_size());
  // The target's running mean of one-token steps, once an AR request ran there.
  ASSERT_TRUE(Generate(Request(TestPrompt(1), v1::AR, 8)).status.ok());
  grpc::ClientContext tctx;
  v1::ModelInfo target;
  auto target_stub = v1::Target::NewStub(
      grpc::CreateChannel(Addr(target_->port()), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(target_stub->GetInfo(&tctx, v1::GetInfoRequest(), &target).ok());
  EXPECT_GT(target.ar_step_ms(), 0);
  EXPECT_EQ(target.revision(), info.target().revision());
}

class HighByteTextTest : public ClusterTest {
 protected:
  void SetUp() override {
    tokenizer_dir_ = WriteByteTokenizer(0x80);
    ClusterTest::SetUp();
  }
};

// Sampling can produce tokens whose bytes form no UTF-8 character; a protobuf string carries
// UTF-8 only, so the router sends each ill-formed piece as U+FFFD (the prompt's echo too) and
// the stream stays readable.
TEST_F(HighByteTextTest, BytesThatFormNoCharacterReachTheClientAsReplacementCharacters) {
  auto tok = tokenizer::Tokenizer::FromFile(tokenizer_dir_ + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> prompt = {7, 8, 9, 10};
  ASSERT_FALSE(tokenizer::IsValidUtf8((*tok)->Decode(prompt)));
  for (v1::Method m : {v1::AR, v1::DFLASH}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GenerateRequest req = Request(prompt, m, 40);
    req.set_return_text(true);
    req.set_echo(true);
    auto reader = stub_->Generate(&ctx, req);
    std::string echoed, streamed;
    std::vector<int32_t> tokens;
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      if (!resp.has_chunk()) continue;
      if (resp.chunk().prompt()) {
        echoed += resp.chunk().text();
        continue;
      }
      streamed += resp.chunk().text();
      tokens.insert(tokens.end(), resp.chunk().token_ids().begin(), resp.chunk().token_ids().end());
    }
    const grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << v1::Method_Name(m) << ": " << status.error_message();
    ASSERT_EQ(tokens.size(), 40u);
    const std::string raw = (*tok)->Decode(tokens);
    EXPECT_FALSE(tokenizer::IsValidUtf8(raw));
    EXPECT_EQ(streamed, tokenizer::ValidUtf8(raw)) << v1::Method_Name(m);
    EXPECT_EQ(echoed, tokenizer::ValidUtf8((*tok)->Decode(prompt)));
  }
}

}  // namespace
}  // namespace specdec::services
