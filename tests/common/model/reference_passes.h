// The passes the reference tests (hf_reference_test, llama_cpp_reference_test) compare against
// another implementation's logits, written once: a prefill then a multi-token verify on top of
// the cache, and a prefill then one step per token.
#ifndef SPECDEC_TESTS_COMMON_MODEL_REFERENCE_PASSES_H_
#define SPECDEC_TESTS_COMMON_MODEL_REFERENCE_PASSES_H_

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <span>
#include <vector>

#include "common/model/transformer.h"
#include "tests/common/model/test_device.h"

namespace specdec::model::testing {

// SPECDEC_TEST_DEVICE (default cpu): where the reference tests run the model.
inline c10::Device TestDevice() { return TestDevice("cpu"); }

// Logits (float64, on the CPU) of `tokens` appended to `cache`: every row or the last.
inline at::Tensor ForwardLogits(const Transformer& m, KvCache* cache,
                                std::span<const int32_t> tokens, LogitsMode mode) {
  SequenceInput in{cache, tokens, {}, {}, mode};
  auto out = m.Forward(std::span<const SequenceInput>(&in, 1));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0].logits.to(at::kCPU).to(at::kDouble) : at::Tensor();
}

// Every row's logits through a prefill of `prompt` and a verify of `verify` (rows 0..n-1).
inline at::Tensor PrefillThenVerify(const Transformer& m, std::span<const int32_t> prompt,
                                    std::span<const int32_t> verify) {
  auto cache = m.NewCache();
  return at::cat({ForwardLogits(m, cache.get(), prompt, LogitsMode::kAll),
                  ForwardLogits(m, cache.get(), verify, LogitsMode::kAll)});
}

// From a fresh cache, a prefill and one step per verify token (rows p-1..n-1).
inline at::Tensor PrefillThenSteps(const Transformer& m, std::span<const int32_t> prompt,
                                   std::span<const int32_t> verify) {
  auto cache = m.NewCache();
  std::vector<at::Tensor> rows = {ForwardLogits(m, cache.get(), prompt, LogitsMode::kLast)};
  for (const int32_t& t : verify) {
    rows.push_back(
        ForwardLogits(m, cache.get(), std::span<const int32_t>(&t, 1), LogitsMode::kLast));
  }
  return at::cat(rows);
}

inline double MaxAbs(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace specdec::model::testing

#endif  // SPECDEC_TESTS_COMMON_MODEL_REFERENCE_PASSES_H_
