// The policy service over real loopback gRPC: predictions equal the in-process BlockPilot,
// concurrent requests are batched, bad requests get INVALID_ARGUMENT with a message, health
// checking answers SERVING, and the metrics count what happened.
#include "services/policy/policy_service.h"

#include <ATen/ATen.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/io/safetensors.h"
#include "common/model/block_pilot.h"
#include "services/common/tensor_proto.h"
#include "specdec/v1/policy.grpc.pb.h"

namespace specdec::services {
namespace {

namespace fs = std::filesystem;

double CounterValue(prometheus::Registry& r, const std::string& name, const std::string& label,
                    const std::string& value) {
  for (const auto& fam : r.Collect()) {
    if (fam.name != name) continue;
    for (const auto& m : fam.metric) {
      for (const auto& l : m.label) {
        if (l.name == label && l.value == value) return m.counter.value;
      }
    }
  }
  return -1;
}

class PolicyServiceTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("specdec_policy_svc_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    config_.vocab_size = 32;
    config_.hidden_size = 16;
    config_.training_block_size = 8;
    config_.block_sizes = {6, 7, 8, 9, 10};
    Start();
  }
  // Writes config_ with random weights and (re)starts the server on it.
  void Start() {
    server_.reset();
    at::manual_seed(4);
    weights_.clear();
    std::vector<io::TensorToWrite> tw;
    for (const auto& s : model::BlockPilot::WeightShapes(config_)) {
      weights_[s.name] = at::randn(s.shape);
      const at::Tensor& t = weights_[s.name];
      tw.push_back({s.name, io::DType::kF32, s.shape,
                    std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.data_ptr()),
                                               t.nbytes())});
    }
    ASSERT_TRUE(io::WriteSafetensors((dir_ / "model.safetensors").string(), tw).ok());
    std::ofstream(dir_ / "config.json") << model::BlockPilotConfigToJson(config_);
    PolicyServerOptions o;
    o.address = "127.0.0.1:0";
    o.metrics_address = "";  // read the registry directly
    o.policy_dir = dir_.string();
    auto s = PolicyServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Policy::NewStub(channel_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  grpc::Status Predict(const std::vector<float>& logits, v1::DType dtype,
                       v1::PredictBlockSizeResponse* resp) {
    v1::PredictBlockSizeRequest req;
    const int64_t shape[] = {static_cast<int64_t>(logits.size())};
    *req.mutable_logits() = FloatsToTensor(logits, shape, dtype);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->PredictBlockSize(&ctx, req, resp);
  }

  fs::path dir_;
  model::BlockPilotConfig config_;
  std::map<std::string, at::Tensor> weights_;
  std::unique_ptr<PolicyServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Policy::Stub> stub_;
};

// `n` random requests answered as the in-process policy answers them: pick, `outputs` candidates
// and scores, and a curve over `positions` draft positions (0: a candidates policy).
void ExpectServedAsInProcess(PolicyServiceTest& t, int n, size_t outputs, size_t positions) {
  auto local = model::BlockPilot::FromTensors(t.config_, t.weights_);
  ASSERT_TRUE(local.ok()) << local.status();
  for (int i = 0; i < n; ++i) {
    at::Tensor x = at::randn({32}) * 4;
    std::vector<float> logits(x.data_ptr<float>(), x.data_ptr<float>() + 32);
    v1::PredictBlockSizeResponse resp;
    grpc::Status s = t.Predict(logits, v1::F32, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    auto want = (*local)->Predict(logits);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(resp.block_size(), want->block_size);
    EXPECT_EQ(resp.candidates_size(), static_cast<int>(outputs));
    ASSERT_EQ(resp.scores_size(), static_cast<int>(outputs));
    ASSERT_EQ(want->acceptance.size(), positions);
    ASSERT_EQ(resp.acceptance_size(), static_cast<int>(positions));
    for (size_t k = 0; k < outputs; ++k) EXPECT_NEAR(resp.scores(k), want->scores[k], 1e-4);
    for (size_t k = 0; k < want->acceptance.size(); ++k) {
      EXPECT_NEAR(resp.acceptance(k), want->acceptance[k], 1e-5);
    }
  }
}

TEST_F(PolicyServiceTest, PredictionsMatchInProcessPolicy) {
  ExpectServedAsInProcess(*this, 20, 5, 0);
  EXPECT_EQ(CounterValue(server_->registry(), "specdec_policy_requests_total", "code", "OK"), 20);
}

// An acceptance policy answers with its curve, tau per candidate and its pick.
TEST_F(PolicyServiceTest, AnAcceptancePolicyAnswersWithItsCurve) {
  config_.head = model::BlockPilotHead::kAcceptance;
  config_.positions = 7;
  config_.block_sizes = {2, 3, 4, 5, 6, 7, 8};
  config_.min_position_share = 0.1;
  config_.acceptance_temperature = 0.7;
  Start();
  ExpectServedAsInProcess(*this, 10, 7, 7);
  v1::PredictBlockSizeResponse resp;
  ASSERT_TRUE(Predict(std::vector<float>(32, 0.f), v1::F32, &resp).ok());
  EXPECT_FLOAT_EQ(resp.acceptance_temperature(), 0.7f);
}

TEST_F(PolicyServiceTest, ConcurrentRequestsAreAllAnswered) {
  std::vector<std::future<int>> futures;
  for (int i = 0; i < 24; ++i) {
    futures.push_back(std::async(std::launch::async, [this, i] {
      std::vector<float> logits(32, 0.f);
      logits[i % 32] = 5.f;
      v1::PredictBlockSizeResponse resp;
      return Predict(logits, v1::BF16, &resp).ok() ? resp.block_size() : -1;
    }));
  }
  for (auto& f : futures) {
    const int b = f.get();
    EXPECT_GE(b, 6);
    EXPECT_LE(b, 10);
  }
}

TEST_F(PolicyServiceTest, BadRequestsGetInvalidArgument) {
  v1::PredictBlockSizeResponse resp;
  grpc::Status s = Predict(std::vector<float>(31, 0.f), v1::F32, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("expected 32 values"), std::string::npos) << s.error_message();
  v1::PredictBlockSizeRequest req;  // no dtype
  req.mutable_logits()->add_shape(32);
  grpc::ClientContext ctx;
  s = stub_->PredictBlockSize(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("dtype"), std::string::npos) << s.error_message();
  std::vector<float> nan(32, std::nanf(""));
  s = Predict(nan, v1::F32, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CounterValue(server_->registry(), "specdec_policy_requests_total", "code",
                         "INVALID_ARGUMENT"),
            3);
  // The service keeps serving good requests.
  EXPECT_TRUE(Predict(std::vector<float>(32, 1.f), v1::F32, &resp).ok());
}

TEST_F(PolicyServiceTest, HealthCheckAndInfo) {
  grpc::GenericStub generic(channel_);
  grpc::Slice empty_message(std::string(""));  // HealthCheckRequest{} serializes to 0 bytes
  grpc::ByteBuffer request(&empty_message, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING

  v1::ModelInfo info;
  grpc::ClientContext ictx;
  ASSERT_TRUE(stub_->GetInfo(&ictx, v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.vocab_size(), 32);
  EXPECT_EQ(info.block_size(), 8);
  EXPECT_EQ(info.block_sizes_size(), 5);
}

TEST(PolicyServerStart, MissingCheckpointIsAClearError) {
  PolicyServerOptions o;
  o.address = "127.0.0.1:0";
  o.metrics_address = "";
  o.policy_dir = "/nonexistent/policy";
  auto s = PolicyServer::Start(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(s.status().message()).find("/nonexistent/policy"), std::string::npos);
}

}  // namespace
}  // namespace specdec::services
