// The model runtime on a CUDA device against the same weights on the CPU (ctest label `gpu`:
// runs only where a GPU is, never in CI). SPECDEC_TEST_DEVICE names the device (default cuda).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/util/status_matchers.h"
#include "tests/common/model/test_device.h"

namespace specdec::model {
namespace {

const std::string kPack = std::string(SPECDEC_SOURCE_DIR) + "/models/specdec-pycode";

c10::Device TestDevice() { return testing::TestDevice("cuda"); }

std::unique_ptr<Transformer> LoadTarget(c10::Device device, at::ScalarType dtype,
                                        bool cuda_graphs = true,
                                        std::optional<at::ScalarType> activations = {}) {
  LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  o.cuda_graphs = cuda_graphs;
  o.activation_dtype = activations;
  auto m = Transformer::Load(kPack + "/target", o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU, at::kDouble) - b.to(at::kCPU, at::kDouble)).abs().max().item<double>();
}

// The logits of one sequence through a prefill, a 9-token verify (rolled back), a tree verify
// whose accepted path is kept, and 5 single-token steps, concatenated in that order.
at::Tensor Trace(const Transformer& m, std::vector<at::Tensor>* features = nullptr) {
  auto cache = m.NewCache();
  std::vector<at::Tensor> rows;
  auto run = [&](std::vector<int32_t> toks, std::vector<int32_t> parents, LogitsMode mode) {
    SequenceInput in{cache.get(), toks, {}, parents, mode};
    ForwardOptions fo;
    fo.capture_layers = {1, 5};
    auto out = m.Forward(std::span<const SequenceInput>(&in, 1), fo);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return;
    EXPECT_TRUE((*out)[0].logits.device().is_cpu());
    EXPECT_EQ((*out)[0].features.device(), m.device());
    rows.push_back((*out)[0].logits);
    if (features != nullptr) features->push_back((*out)[0].features);
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(4 + (i * 37 + 11) % 4000);
  run(prompt, {}, LogitsMode::kAll);
  run({10, 20, 30, 40, 50, 60, 70, 80, 90}, {}, LogitsMode::kAll);
  EXPECT_TRUE(cache->Truncate(40).ok());
  run({100, 200, 300, 400, 500, 600, 700, 800}, {-1, 0, 0, 1, 2, 3, -1, 6}, LogitsMode::kAll);
  const std::vector<int64_t> keep = {40, 41, 43,
                                     45};  // nodes 0 -> 1 -> 3 -> 5: a root-to-leaf path
  EXPECT_TRUE(cache->KeepRows(40, keep).ok());
  for (int i = 0; i < 5; ++i) run({1000 + 17 * i}, {}, LogitsMode::kLast);
  return at::cat(rows, 0);
}

TEST(TransformerCudaTest, F32LogitsMatchTheCpuThroughPrefillVerifyTreeAndSteps) {
  const c10::Device device = TestDevice();
  auto cpu = LoadTarget(c10::kCPU, at::kFloat);
  auto gpu = LoadTarget(device, at::kFloat);
  ASSERT_TRUE(cpu && gpu);
  EXPECT_EQ(gpu->device(), device);
  const at::Tensor want = Trace(*cpu), got = Trace(*gpu);
  ASSERT_EQ(want.sizes(), got.sizes());
  const double diff = MaxAbsDiff(want, got);
  const double scale = want.abs().max().item<double>();
  std::printf("f32 %s vs cpu: max |logit diff| %.3g (max |logit| %.3g) over %lld rows\n",
              device.str().c_str(), diff, scale, static_cast<long long>(want.size(0)));
  EXPECT_LT(diff, 1e-3);
  EXPECT_TRUE(at::equal(want.argmax(1), got.argmax(1)));
}

TEST(TransformerCudaTest, Bf16IsAsAccurateAsTheCpusBf16) {
  const c10::Device device = TestDevice();
  auto ref = LoadTarget(c10::kCPU, at::kFloat);
  // The GPU's arithmetic: bf16 activations too, every intermediate rounded (the CPU's default
  // keeps them in float, which is more accurate).
  auto cpu = LoadTarget(c10::kCPU, at::kBFloat16, true, at::kBFloat16);
  auto gpu = LoadTarget(device, at::kBFloat16);
  ASSERT_TRUE(ref && cpu && gpu);
  const at::Tensor want = Trace(*ref);
  const double cpu_err = MaxAbsDiff(want, Trace(*cpu)), gpu_err = MaxAbsDiff(want, Trace(*gpu));
  std::printf("bf16 max |logit - f32 logit|: cpu %.3g, %s %.3g\n", cpu_err, device.str().c_str(),
              gpu_err);
  EXPECT_LT(gpu_err, std::max(2 * cpu_err, 0.05));
}

TEST(TransformerCudaTest, DFlashDrafterMatchesTheCpu) {
  const c10::Device device = TestDevice();
  auto cpu = LoadTarget(c10::kCPU, at::kFloat);
  auto gpu = LoadTarget(device, at::kFloat);
  ASSERT_TRUE(cpu && gpu);
  auto draft = [&](const Transformer& target) {
    auto drafter = DFlashDrafter::Load(kPack + "/dflash", target);
    EXPECT_TRUE(drafter.ok()) << drafter.status();
    std::vector<at::Tensor> features;
    Trace(target, &features);
    auto cache = (*drafter)->NewCache();
    std::vector<at::Tensor> out;
    for (int step = 0; step < 3; ++step) {
      DraftInput in{cache.get(), features[step], 77 + step, 16};
      auto logits = (*drafter)->Draft(std::span<const DraftInput>(&in, 1));
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (logits.ok()) out.push_back((*logits)[0]);
    }
    return at::cat(out, 0);
  };
  const at::Tensor want = draft(*cpu), got = draft(*gpu);
  ASSERT_EQ(want.sizes(), got.sizes());
  const double diff = MaxAbsDiff(want, got);
  std::printf("DFlash draft logits f32 %s vs cpu: max diff %.3g\n", device.str().c_str(), diff);
  EXPECT_LT(diff, 1e-3);
}

// Many single-token steps and 17-row verifies, each shape captured on its second use and
// replayed after, across the cache's growth (64, 128, 256 slots), against the same passes
// uncaptured; and a second cache that captures its own graphs.
TEST(TransformerCudaTest, CudaGraphsGiveTheUncapturedLogits) {
  const c10::Device device = TestDevice();
  at::Tensor f32_logits;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto graphs = LoadTarget(device, dtype, true);
    auto plain = LoadTarget(device, dtype, false);
    ASSERT_TRUE(graphs && plain);
    auto trace = [&](const Transformer& m) {
      std::vector<at::Tensor> rows;
      for (int c = 0; c < 2; ++c) {
        auto cache = m.NewCache();
        auto run = [&](std::vector<int32_t> toks, LogitsMode mode) {
          SequenceInput in{cache.get(), toks, {}, {}, mode};
          auto out = m.Forward(std::span<const SequenceInput>(&in, 1));
          EXPECT_TRUE(out.ok()) << out.status();
          if (out.ok()) rows.push_back((*out)[0].logits);
        };
        std::vector<int32_t> prompt;
        for (int i = 0; i < 30; ++i) prompt.push_back(4 + (i * 37 + 11 + c) % 4000);
        run(prompt, LogitsMode::kLast);
        for (int i = 0; i < 150; ++i) {
          run({5 + (i * 53 + c) % 4000}, LogitsMode::kLast);
          if (i % 10 != 0) continue;
          std::vector<int32_t> block;
          for (int j = 0; j < 17; ++j) block.push_back(5 + (i * 7 + j * 31) % 4000);
          const int64_t length = cache->length();
          run(block, LogitsMode::kAll);
          EXPECT_TRUE(cache->Truncate(length + 3).ok());  // three accepted
        }
      }
      return at::cat(rows, 0);
    };
    const at::Tensor want = trace(*plain), got = trace(*graphs);
    ASSERT_EQ(want.sizes(), got.sizes());
    const double diff = MaxAbsDiff(want, got);
    std::printf(
        "%s: CUDA graphs against uncaptured: max |logit diff| %.3g over %lld rows, %lld "
        "graphs captured\n",
        c10::toString(dtype), diff, static_cast<long long>(want.size(0)),
        static_cast<long long>(graphs->captured_graphs()));
    if (dtype == at::kFloat) {
      f32_logits = want;
      EXPECT_LT(diff, 1e-3);
    } else {  // graphs add no more than bf16 itself costs (attention over other key counts)
      const double bf16_err = MaxAbsDiff(want, f32_logits);
      std::printf("bf16 uncaptured against f32: %.3g\n", bf16_err);
      EXPECT_LT(diff, 2 * bf16_err);
    }
    EXPECT_GE(graphs->captured_graphs(), 4);  // two shapes per cache at least
    EXPECT_EQ(plain->captured_graphs(), 0);
    if (dtype == at::kFloat) {
      EXPECT_GT(at::eq(want.argmax(1), got.argmax(1)).to(at::kFloat).mean().item<double>(), 0.99);
    }
  }
}

// The pack's drafter through 60 drafts of 1 to 16 new context rows at block sizes 16 and 6,
// graphed (each block size captured on its second use, across the cache's growth) against the
// same drafts uncaptured.
TEST(TransformerCudaTest, CudaGraphsGiveTheUncapturedDraftLogits) {
  const c10::Device device = TestDevice();
  at::Tensor f32_logits;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto graphs = LoadTarget(device, dtype, true);
    auto plain = LoadTarget(device, dtype, false);
    ASSERT_TRUE(graphs && plain);
    auto drafts = [&](const Transformer& target, int64_t* captured) {
      auto drafter = DFlashDrafter::Load(kPack + "/dflash", target);
      EXPECT_TRUE(drafter.ok()) << drafter.status();
      if (!drafter.ok()) return at::Tensor();
      const int64_t width = 2 * target.config().hidden_size;
      at::manual_seed(5);  // the same features for every drafter compared
      auto cache = (*drafter)->NewCache();
      std::vector<at::Tensor> out;
      for (int step = 0; step < 60; ++step) {
        const int32_t b = step % 3 == 2 ? 6 : 16;
        const int64_t m = step == 0 ? 40 : 1 + (step * 7) % b;
        DraftInput in{cache.get(), at::randn({m, width}).to(device), 77 + step, b};
        auto logits = (*drafter)->Draft(std::span<const DraftInput>(&in, 1));
        EXPECT_TRUE(logits.ok()) << logits.status();
        if (logits.ok()) out.push_back((*logits)[0]);
      }
      *captured = (*drafter)->captured_graphs();
      return at::cat(out, 0);
    };
    int64_t captured = 0, uncaptured = 0;
    const at::Tensor want = drafts(*plain, &uncaptured), got = drafts(*graphs, &captured);
    ASSERT_TRUE(want.defined() && got.defined());
    ASSERT_EQ(want.sizes(), got.sizes());
    const double diff = MaxAbsDiff(want, got);
    const double agree = at::eq(want.argmax(1), got.argmax(1)).to(at::kFloat).mean().item<double>();
    std::printf(
        "%s: DFlash drafts graphed against uncaptured: max |logit diff| %.3g over %lld "
        "rows, argmax agreement %.4f, %lld graphs captured\n",
        c10::toString(dtype), diff, static_cast<long long>(want.size(0)), agree,
        static_cast<long long>(captured));
    if (dtype == at::kFloat) {
      f32_logits = want;
      EXPECT_LT(diff, 1e-3);
    } else {  // graphs add no more than bf16 itself costs (fused attention over other key counts)
      const double bf16_err = MaxAbsDiff(want, f32_logits);
      std::printf("bf16 uncaptured drafts against f32: %.3g\n", bf16_err);
      EXPECT_LT(diff, 2 * bf16_err);
    }
    EXPECT_GE(captured, 2);  // both block sizes, again after each reallocation
    EXPECT_EQ(uncaptured, 0);
    if (dtype == at::kFloat) {
      EXPECT_GT(agree, 0.99);
    }
  }
}

TEST(TransformerCudaTest, ForeignDeviceNamesAreRefused) {
  SPECDEC_EXPECT_STATUS(LoadOptions::ParseDevice("cuda:64"), absl::StatusCode::kFailedPrecondition,
                        "CUDA devices");
  SPECDEC_EXPECT_STATUS(LoadOptions::ParseDevice("tpu"), absl::StatusCode::kInvalidArgument,
                        "cpu, cuda or cuda:N");
}

}  // namespace
}  // namespace specdec::model
