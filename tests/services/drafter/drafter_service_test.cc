// The drafter service over real loopback gRPC: DFlash blocks and AR chains/trees equal the
// in-process draft sessions; bad operations get per-operation errors; stream end frees handles.
#include "services/drafter/drafter_service.h"

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "common/engine/draft_session.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "services/common/tensor_proto.h"
#include "specdec/v1/drafter.grpc.pb.h"
#include "tests/services/test_checkpoints.h"

namespace specdec::services {
namespace {

using Stream = grpc::ClientReaderWriter<v1::DrafterRequest, v1::DrafterResponse>;

model::ModelConfig Config(int64_t hidden, int64_t layers) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 53;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = true;
  return c;
}

class DrafterServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tc = Config(32, 3);
    target_dir_ = new std::string(testing_util::WriteCheckpoint(
        "drafter_svc_target", model::Transformer::RandomWeights(tc, 1, 0.3),
        model::ModelConfigToJson(tc)));
    auto dc = Config(16, 1);
    draft_dir_ = new std::string(testing_util::WriteCheckpoint(
        "drafter_svc_draft", model::Transformer::RandomWeights(dc, 2, 0.3),
        model::ModelConfigToJson(dc)));
    model::DFlashConfig fc;
    fc.layers = Config(32, 1);
    fc.block_size = 4;
    fc.mask_token_id = 52;
    fc.target_layer_ids = {0, 2};
    dflash_dir_ = new std::string(testing_util::WriteCheckpoint(
        "drafter_svc_dflash", model::DFlashDrafter::RandomWeights(fc, 32, 3, 0.3),
        model::DFlashConfigToJson(fc)));
  }

  void SetUp() override {
    DrafterServerOptions o;
    o.address = "127.0.0.1:0";
    o.metrics_address = "";
    o.target_dir = *target_dir_;
    o.dflash_dir = *dflash_dir_;
    o.draft_lm_dir = *draft_dir_;
    o.replica = "d0";
    o.threads = 1;
    auto s = DrafterServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = v1::Drafter::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                                     grpc::InsecureChannelCredentials()));
    ctx_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Session(ctx_.get());
  }
  void TearDown() override {
    if (stream_) {
      stream_->WritesDone();
      stream_->Finish();
    }
  }

  v1::DrafterResponse Call(v1::DrafterRequest req) {
    req.set_seq(++seq_);
    EXPECT_TRUE(stream_->Write(req));
    v1::DrafterResponse resp;
    EXPECT_TRUE(stream_->Read(&resp));
    EXPECT_EQ(resp.seq(), seq_);
    return resp;
  }
  std::string Open(v1::DraftModelKind kind, float temperature) {
    v1::DrafterRequest r;
    r.mutable_open()->set_kind(kind);
    r.mutable_open()->mutable_sampling()->set_temperature(temperature);
    r.mutable_open()->mutable_sampling()->set_seed(5);
    auto resp = Call(r);
    EXPECT_TRUE(resp.has_opened()) << resp.error().message();
    EXPECT_GT(resp.opened().lease_ms(), 0);
    EXPECT_GT(resp.opened().lease_expires_unix_ms(), 1700000000000);  // a Unix time in ms, 2023+
    return resp.opened().id();
  }

  static std::string* target_dir_;
  static std::string* draft_dir_;
  static std::string* dflash_dir_;
  std::unique_ptr<DrafterServer> server_;
  std::unique_ptr<v1::Drafter::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<Stream> stream_;
  uint64_t seq_ = 0;
};
std::string* DrafterServiceTest::target_dir_ = nullptr;
std::string* DrafterServiceTest::draft_dir_ = nullptr;
std::string* DrafterServiceTest::dflash_dir_ = nullptr;

TEST_F(DrafterServiceTest, DflashBlocksEqualTheInProcessSession) {
  auto target = model::Transformer::Load(*target_dir_);
  ASSERT_TRUE(target.ok());
  auto dflash = model::DFlashDrafter::Load(*dflash_dir_, **target);
  ASSERT_TRUE(dflash.ok());
  // Target features of a prompt, as the target service would send them (BF16).
  std::vector<int32_t> prompt = {1, 7, 9, 30, 2, 11};
  auto cache = (*target)->NewCache();
  model::SequenceInput in{cache.get(), prompt};
  model::ForwardOptions fo;
  fo.capture_layers = {0, 2};
  auto out = (*target)->Forward(std::span<const model::SequenceInput>(&in, 1), fo);
  ASSERT_TRUE(out.ok());
  at::Tensor f = (*out)[0].features.contiguous();
  const int64_t shape[] = {f.size(0), f.size(1)};
  v1::Tensor wire =
      FloatsToTensor(std::span<const float>(f.data_ptr<float>(), f.numel()), shape, v1::BF16);
  auto decoded = TensorToFloats(wire, "features");
  ASSERT_TRUE(decoded.ok());
  engine::DFlashDraftSession local(**dflash);
  local.Extend(at::from_blob(decoded->data(), {shape[0], shape[1]}, at::kFloat).clone());
  auto want = local.DraftBlock(17, 4);
  ASSERT_TRUE(want.ok());

  const std::string h = Open(v1::DFLASH_DRAFTER, 0.f);
  v1::DrafterRequest block;
  block.mutable_draft_block()->set_handle(h);
  block.mutable_draft_block()->set_last_token(17);
  block.mutable_draft_block()->set_block_size(4);
  *block.mutable_draft_block()->mutable_new_features() = wire;
  auto resp = Call(block);
  ASSERT_TRUE(resp.has_drafted()) << resp.error().message();
  EXPECT_EQ(std::vector<int32_t>(resp.drafted().tokens().begin(), resp.drafted().tokens().end()),
            *want);
}

TEST_F(DrafterServiceTest, ArChainsAndTreesEqualTheInProcessSession) {
  auto draft = model::Transformer::Load(*draft_dir_);
  ASSERT_TRUE(draft.ok());
  engine::ArDraftSession local(**draft, sampling::SamplingParams{1.f, 0, 1.f, 5});
  std::vector<int32_t> prompt = {3, 4, 5};
  local.Extend(prompt);
  auto want = local.DraftChain(8, 3);
  ASSERT_TRUE(want.ok());

  const std::string h = Open(v1::AR_DRAFT_LM, 1.f);
  v1::DrafterRequest ext;
  ext.mutable_extend()->set_handle(h);
  for (int32_t t : prompt) ext.mutable_extend()->add_tokens(t);
  ASSERT_TRUE(Call(ext).has_extended());
  v1::DrafterRequest chain;
  chain.mutable_draft_chain()->set_handle(h);
  chain.mutable_draft_chain()->set_last_token(8);
  chain.mutable_draft_chain()->set_length(3);
  auto resp = Call(chain);
  ASSERT_TRUE(resp.has_drafted()) << resp.error().message();
  EXPECT_EQ(std::vector<int32_t>(resp.drafted().tokens().begin(), resp.drafted().tokens().end()),
            want->tokens);
  auto q = TensorToFloats(resp.drafted().probs(), "probs");
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->size(), want->probs.size());
  for (size_t i = 0; i < q->size(); ++i) EXPECT_FLOAT_EQ((*q)[i], want->probs[i]);

  // Commit the first token, then a tree.
  v1::DrafterRequest commit;
  commit.mutable_commit()->set_handle(h);
  commit.mutable_commit()->add_accepted(want->tokens[0]);
  ASSERT_TRUE(Call(commit).has_committed());
  ASSERT_TRUE(local.Commit(std::span<const int32_t>(want->tokens).first(1)).ok());
  engine::TreeParams tp;
  tp.budget = 6;
  tp.max_depth = 3;
  auto want_tree = local.DraftTree(20, tp);
  ASSERT_TRUE(want_tree.ok());
  v1::DrafterRequest tree;
  tree.mutable_draft_tree()->set_handle(h);
  tree.mutable_draft_tree()->set_last_token(20);
  tree.mutable_draft_tree()->set_budget(6);
  tree.mutable_draft_tree()->set_max_depth(3);
  resp = Call(tree);
  ASSERT_TRUE(resp.has_drafted()) << resp.error().message();
  EXPECT_EQ(std::vector<int32_t>(resp.drafted().tokens().begin(), resp.drafted().tokens().end()),
            want_tree->tree.tokens);
  EXPECT_EQ(std::vector<int32_t>(resp.drafted().tree_parents().begin(),
                                 resp.drafted().tree_parents().end()),
            want_tree->tree.parents);
}

TEST_F(DrafterServiceTest, BadOperationsAndStreamEnd) {
  v1::DrafterRequest open;
  open.mutable_open();  // no kind
  EXPECT_EQ(Call(open).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string h = Open(v1::DFLASH_DRAFTER, 0.f);
  v1::DrafterRequest chain;
  chain.mutable_draft_chain()->set_handle(h);
  chain.mutable_draft_chain()->set_length(3);
  EXPECT_EQ(Call(chain).error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::DrafterRequest block;
  block.mutable_draft_block()->set_handle(h);
  block.mutable_draft_block()->set_last_token(1);
  block.mutable_draft_block()->set_block_size(1);
  EXPECT_EQ(Call(block).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  block.mutable_draft_block()->set_block_size(4);
  block.mutable_draft_block()->mutable_new_features()->set_dtype(v1::F32);
  block.mutable_draft_block()->mutable_new_features()->add_shape(1);
  block.mutable_draft_block()->mutable_new_features()->add_shape(5);
  block.mutable_draft_block()->mutable_new_features()->set_data(std::string(20, '\0'));
  auto e = Call(block);
  EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(e.error().message().find("features must be"), std::string::npos);
  v1::DrafterRequest unknown;
  unknown.mutable_release()->set_handle("d0/12345-1");
  EXPECT_EQ(Call(unknown).error().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(server_->handles_in_use(), 1u);
  stream_->WritesDone();
  EXPECT_TRUE(stream_->Finish().ok());
  stream_.reset();
  for (int i = 0; i < 300 && server_->handles_in_use() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->handles_in_use(), 0u);
}

}  // namespace
}  // namespace specdec::services
