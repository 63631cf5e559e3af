// specdec's logits against a second independent implementation: llama.cpp, run on the same
// weights exported by `specdec convert --outtype f32` (tests/data/llama_cpp_reference, made by
// its make_fixtures.sh, which records llama.cpp's release and commit). The random Qwen3 and
// Llama (Llama 3.1 rope scaling) fixtures and the embedded pack's target: a prefill, a verify on
// top of the cache and single steps must reproduce llama.cpp's float32 logits; the pack's prompt,
// tokenized by llama.cpp from text, must be what specdec's tokenizer makes of that text.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/io/safetensors.h"
#include "common/model/model_config.h"
#include "common/model/transformer.h"
#include "common/model/weights.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_matchers.h"
#include "tests/common/model/reference_passes.h"

namespace specdec::model {
namespace {

using testing::MaxAbs;
using testing::PrefillThenSteps;
using testing::PrefillThenVerify;
using testing::TestDevice;

const std::string kRoot = std::string(SPECDEC_SOURCE_DIR) + "/";
// float32 against float32 with other kernels (llama.cpp's ggml): a few ulps of accumulated
// rounding, as against Transformers.
constexpr double kF32Tolerance = 1e-4;

struct Case {
  std::string name;   // tests/data/llama_cpp_reference/<name>
  std::string model;  // the HF checkpoint directory, relative to the repository
};

struct Expected {
  std::vector<int32_t> prompt, verify;
  std::string prompt_text;
  at::Tensor logits;  // [prompt + verify, vocab], float64
};

Expected LoadExpected(const std::string& name) {
  Expected e;
  const std::string dir = kRoot + "tests/data/llama_cpp_reference/" + name;
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << dir << "/expected.json";
  if (j.is_discarded()) return e;
  e.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  e.verify = j.at("verify_ids").get<std::vector<int32_t>>();
  e.prompt_text = j.value("prompt_text", "");
  auto file = io::SafetensorsFile::Open(dir + "/logits.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return e;
  const io::TensorView& v = (*file)->tensors().at("logits_f32");
  at::Tensor t = at::empty(v.shape, at::kFloat);
  std::memcpy(t.data_ptr(), v.data, v.nbytes);
  e.logits = t.to(at::kDouble);
  return e;
}

std::unique_ptr<Transformer> LoadF32(const Case& c) {
  LoadOptions o;
  o.dtype = at::kFloat;
  o.device = TestDevice();
  auto m = Transformer::Load(kRoot + c.model, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

class LlamaCppReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaCppReferenceTest, F32LogitsEqualLlamaCpp) {
  const Expected e = LoadExpected(GetParam().name);
  ASSERT_TRUE(e.logits.defined());
  auto m = LoadF32(GetParam());
  ASSERT_NE(m, nullptr);
  const at::Tensor verified = PrefillThenVerify(*m, e.prompt, e.verify);
  const at::Tensor stepped = PrefillThenSteps(*m, e.prompt, e.verify);
  const int64_t p = static_cast<int64_t>(e.prompt.size());
  const double verify_err = MaxAbs(verified, e.logits);
  const double step_err = MaxAbs(stepped, e.logits.narrow(0, p - 1, e.logits.size(0) - p + 1));
  std::printf("%s f32 against llama.cpp: prefill+verify %.3g, steps %.3g (max |logit| %.3g)\n",
              GetParam().name.c_str(), verify_err, step_err, e.logits.abs().max().item<double>());
  EXPECT_LT(verify_err, kF32Tolerance);
  EXPECT_LT(step_err, kF32Tolerance);
  EXPECT_TRUE(at::equal(verified.argmax(1), e.logits.argmax(1)));
}

// The comparison can fail: a wrong rope_theta (a planted runtime bug) lands far outside it.
TEST_P(LlamaCppReferenceTest, AWrongRopeThetaIsCaught) {
  const Expected e = LoadExpected(GetParam().name);
  ASSERT_TRUE(e.logits.defined());
  const std::string dir = kRoot + GetParam().model;
  SPECDEC_ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(dir));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto tensors, LoadTensors(dir, TransformerTensorSpecs(c)));
  c.rope_theta *= 0.5;
  LoadOptions o;
  o.dtype = at::kFloat;
  o.device = TestDevice();
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto wrong, Transformer::FromTensors(c, tensors, o));
  const double err = MaxAbs(PrefillThenVerify(*wrong, e.prompt, e.verify), e.logits);
  std::printf("%s with rope_theta halved: %.3g\n", GetParam().name.c_str(), err);
  EXPECT_GT(err, 100 * kF32Tolerance);
}

TEST(LlamaCppReferenceTokens, ThePacksPromptTokenizesAsInLlamaCpp) {
  const Expected e = LoadExpected("pack");
  ASSERT_FALSE(e.prompt_text.empty());
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      auto tok,
      tokenizer::Tokenizer::FromFile(kRoot + "models/specdec-pycode/target/tokenizer.json"));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok->Encode(e.prompt_text, true));
  EXPECT_EQ(ids, e.prompt);
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaCppReferenceTest,
                         ::testing::Values(Case{"qwen3", "tests/data/hf_reference/qwen3"},
                                           Case{"llama", "tests/data/hf_reference/llama"},
                                           Case{"pack", "models/specdec-pycode/target"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace specdec::model
