#include "services/common/tensor_proto.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/util/status_matchers.h"

namespace specdec::services {
namespace {

TEST(TensorProto, F32AndBf16RoundTrip) {
  std::vector<float> v = {1.f, -2.5f, 0.f, 3.140625f, 1e-3f, -65504.f};
  const int64_t shape[] = {2, 3};
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto f32, TensorToFloats(FloatsToTensor(v, shape, v1::F32), "x"));
  EXPECT_EQ(f32, v);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto bf, TensorToFloats(FloatsToTensor(v, shape, v1::BF16), "x"));
  ASSERT_EQ(bf.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(bf[i], v[i], std::fabs(v[i]) / 128 + 1e-6) << i;  // 8 significant bits
  }
  EXPECT_EQ(bf[3], 3.140625f);  // exactly representable in bf16
}

TEST(TensorProto, F16Decodes) {
  v1::Tensor t;
  t.set_dtype(v1::F16);
  t.add_shape(3);
  const uint16_t h[] = {0x3c00, 0xc000, 0x3555};  // 1, -2, ~0.333
  t.set_data(std::string(reinterpret_cast<const char*>(h), 6));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto f, TensorToFloats(t, "x"));
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], -2.f);
  EXPECT_NEAR(f[2], 0.3333, 1e-3);
}

TEST(TensorProto, BadTensorsNameTheField) {
  v1::Tensor t;
  t.add_shape(4);
  SPECDEC_EXPECT_STATUS(TensorToFloats(t, "verify.draft_probs"), absl::StatusCode::kInvalidArgument,
                        "verify.draft_probs: dtype");
  t.set_dtype(v1::F32);
  t.set_data(std::string(12, '\0'));
  SPECDEC_EXPECT_STATUS(TensorToFloats(t, "logits"), absl::StatusCode::kInvalidArgument,
                        "12 bytes do not match shape");
  t.set_shape(0, -1);
  SPECDEC_EXPECT_STATUS(TensorToFloats(t, "logits"), absl::StatusCode::kInvalidArgument,
                        "negative");
}

}  // namespace
}  // namespace specdec::services
