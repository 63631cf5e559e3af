// Lossless speculative decoding on a CUDA device (ctest label `gpu`: runs only where a GPU is,
// never in CI): every method's greedy output equals AR's on the same device (exactly in the
// row-independent mode), and stories260K prints its published greedy text from the GPU.
// SPECDEC_TEST_DEVICE names the device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/engine/decoder.h"
#include "common/io/gguf_to_hf.h"
#include "common/model/block_pilot.h"
#include "common/model/cuda_ops.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_matchers.h"
#include "tests/common/engine/expect_same_as_ar.h"
#include "tests/common/model/test_device.h"
#include "tests/common/remove_tree.h"

namespace specdec::engine {
namespace {

namespace fs = std::filesystem;
using model::Transformer;

const std::string kPack = std::string(SPECDEC_SOURCE_DIR) + "/models/specdec-pycode";

c10::Device TestDevice() { return model::testing::TestDevice("cuda"); }

struct PackModels {
  std::unique_ptr<Transformer> target, draft;
  std::unique_ptr<model::DFlashDrafter> dflash;
  std::unique_ptr<model::BlockPilot> policy;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

PackModels LoadPack(c10::Device device, at::ScalarType dtype) {
  PackModels m;
  model::LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  m.target = *Transformer::Load(kPack + "/target", o);
  m.draft = *Transformer::Load(kPack + "/draft", o);
  m.dflash = *model::DFlashDrafter::Load(kPack + "/dflash", *m.target);
  m.policy = *model::BlockPilot::Load(kPack + "/policy");
  m.tok = *tokenizer::Tokenizer::FromFile(kPack + "/target/tokenizer.json");
  return m;
}

std::vector<std::string> CodePrompts() {
  return {
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
      "import os\n\n\ndef list_python_files(path):\n",
      "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
      "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n"};
}

void EveryMethodEqualsAr(at::ScalarType dtype, double tie) {
  const c10::Device device = TestDevice();
  PackModels m = LoadPack(device, dtype);
  EngineModels em{m.target.get(), m.draft.get(), m.dflash.get(), m.policy.get()};
  for (const std::string& text : CodePrompts()) {
    auto prompt = m.tok->Encode(text, true);
    ASSERT_TRUE(prompt.ok());
    DecodeOptions ar;
    ar.max_new_tokens = 64;
    auto base = Decode(em, *prompt, ar);
    ASSERT_TRUE(base.ok()) << base.status();
    for (Method method : {Method::kDflash, Method::kDflashAdaptive, Method::kDraftChain,
                          Method::kDyspecTree, Method::kNgram}) {
      DecodeOptions o = ar;
      o.method = method;
      auto r = Decode(em, *prompt, o);
      ASSERT_TRUE(r.ok()) << MethodName(method) << ": " << r.status();
      std::printf("%s %s: tau %.2f\n", device.str().c_str(), MethodName(method), r->stats.tau());
      testing_util::ExpectSameAsAr(*m.target, *prompt, base->tokens, r->tokens, tie,
                                   std::string(MethodName(method)));
    }
  }
}

TEST(DecoderCudaTest, EveryMethodEqualsArInF32) { EveryMethodEqualsAr(at::kFloat, 1e-3); }

// bf16 logits carry about 8 bits of mantissa: a verify and a step may rank two tokens within a
// few hundredths of each other differently.
TEST(DecoderCudaTest, EveryMethodEqualsArInBf16) { EveryMethodEqualsAr(at::kBFloat16, 0.125); }

// The row-independent mode (cuda_ops.h) is read once per process. ctest runs each test of this
// file in a process of its own, and this one turns the mode on before any model code runs: then
// every method's greedy output equals AR's token for token, with no allowance for near ties.
TEST(DecoderCudaTest, RowIndependentModeEqualsArWithoutNearTies) {
  setenv("SPECDEC_CUDA_ROW_INDEPENDENT", "1", 1);
  ASSERT_TRUE(model::CudaRowIndependent())
      << "the mode was read before this test turned it on: run the test alone (--gtest_filter)";
  EveryMethodEqualsAr(at::kBFloat16, 0.0);
  EveryMethodEqualsAr(at::kFloat, 0.0);
}

// The greedy sample the stories260K authors published, generated on the GPU by AR and by a
// self-drafting chain.
TEST(DecoderCudaTest, Stories260KPrintsThePublishedGreedyText) {
  const fs::path stories = fs::path(SPECDEC_SHARED_DIR) / "models/stories260K";
  ASSERT_TRUE(fs::exists(stories / "stories260K.gguf")) << "needs ../shared/models/stories260K";
  std::ifstream doc(stories / "stories260K.upstream-doc.md");
  std::string line, expected;
  bool in_block = false;
  while (std::getline(doc, line)) {
    if (!in_block && line.find("-t 0.0") != std::string::npos) {
      in_block = true;
    } else if (in_block) {
      if (line.rfind("```", 0) == 0) break;
      expected += line + "\n";
    }
  }
  ASSERT_GT(expected.size(), 500u);
  expected.pop_back();  // the newline the command line printed after the 256 tokens
  const std::string dir = fs::temp_directory_path() / ("specdec_cuda_" + std::to_string(getpid()));
  SPECDEC_ASSERT_OK(io::ConvertGgufToHf((stories / "stories260K.gguf").string(), dir));
  model::LoadOptions o;
  o.device = TestDevice();
  o.dtype = at::kFloat;
  auto target = Transformer::Load(dir, o);
  ASSERT_TRUE(target.ok()) << target.status();
  auto tok = tokenizer::Tokenizer::FromFile(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EngineModels em{target->get(), target->get()};
  for (Method method : {Method::kAr, Method::kDraftChain}) {
    DecodeOptions opts;
    opts.method = method;
    opts.max_new_tokens = 256;
    auto r = Decode(em, std::vector<int32_t>{1}, opts);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string got = (*tok)->Decode(r->tokens);
    size_t i = 0;
    while (i < expected.size() && i < got.size() && expected[i] == got[i]) ++i;
    EXPECT_EQ(i, expected.size()) << MethodName(method) << " diverges at byte " << i
                                  << "\nexpected: " << expected.substr(i, 80)
                                  << "\ngot:      " << got.substr(i, 80);
  }
  testing_util::RemoveTree(dir);
}

}  // namespace
}  // namespace specdec::engine
