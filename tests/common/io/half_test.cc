// F16/BF16 bit patterns to and from float: every finite F16 and BF16 pattern round-trips through
// float exactly, and values that are not representable are refused.
#include "common/io/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace specdec::io {
namespace {

TEST(HalfTest, EveryHalfPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const std::optional<uint16_t> back = ExactHalf(f);
    ASSERT_TRUE(back.has_value()) << std::hex << h;
    ASSERT_EQ(*back, h) << std::hex << h;
  }
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0xfbff), -65504.0f);
}

TEST(HalfTest, EveryBf16PatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) continue;  // NaN
    const std::optional<uint16_t> back = ExactBf16(Bf16ToFloat(static_cast<uint16_t>(b)));
    ASSERT_TRUE(back.has_value()) << std::hex << b;
    ASSERT_EQ(*back, b) << std::hex << b;
  }
}

// Rounding to BF16: exact values keep their pattern, a value between two BF16 neighbours goes to
// the nearer one, a tie to the even one, overflow to infinity, NaN stays NaN.
TEST(HalfTest, RoundBf16RoundsToNearestEven) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) continue;  // NaN
    ASSERT_EQ(RoundBf16(Bf16ToFloat(static_cast<uint16_t>(b))), b) << std::hex << b;
  }
  const float one = 1.0f, next = Bf16ToFloat(0x3f81);  // 1 and the BF16 after it
  EXPECT_EQ(RoundBf16(one + (next - one) * 0.25f), 0x3f80);
  EXPECT_EQ(RoundBf16(one + (next - one) * 0.75f), 0x3f81);
  EXPECT_EQ(RoundBf16(one + (next - one) * 0.5f), 0x3f80);                   // tie: even
  EXPECT_EQ(RoundBf16(next + (Bf16ToFloat(0x3f82) - next) * 0.5f), 0x3f82);  // tie: even
  EXPECT_EQ(RoundBf16(-(one + (next - one) * 0.75f)), 0xbf81);
  EXPECT_EQ(RoundBf16(3.4e38f), 0x7f80);  // past the largest BF16: infinity
  EXPECT_TRUE(std::isnan(Bf16ToFloat(RoundBf16(std::nanf("")))));
}

TEST(HalfTest, UnrepresentableValuesAreRefused) {
  EXPECT_FALSE(ExactHalf(1.0f + std::ldexp(1.0f, -11)).has_value());  // between two halves
  EXPECT_FALSE(ExactHalf(70000.0f).has_value());                      // above the largest
  EXPECT_FALSE(ExactHalf(std::ldexp(1.0f, -25)).has_value());         // below the smallest
  EXPECT_FALSE(ExactHalf(std::ldexp(3.0f, -26)).has_value());         // subnormal, lost bits
  EXPECT_FALSE(ExactBf16(1.0f + std::ldexp(1.0f, -9)).has_value());
  EXPECT_EQ(ExactBf16(-2.0f), std::optional<uint16_t>(0xc000));
}

}  // namespace
}  // namespace specdec::io
