#include "cli/repetition.h"

#include <gtest/gtest.h>

#include <vector>

namespace specdec::cli {
namespace {

TEST(RepetitionTest, DistinctTokensHaveNoRepeats) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const NgramRepetition r = CountRepeatedNgrams(t, 8);
  EXPECT_EQ(r.ngrams, 3);
  EXPECT_EQ(r.repeated, 0);
  EXPECT_EQ(r.share(), 0.0);
}

TEST(RepetitionTest, ALoopRepeatsEveryNgramAfterItsFirstPeriod) {
  // Period 3 repeated: "a b c a b c a b c" has 7 trigrams, the first 3 new, the other 4 repeats.
  const std::vector<int32_t> t = {5, 6, 7, 5, 6, 7, 5, 6, 7};
  const NgramRepetition r = CountRepeatedNgrams(t, 3);
  EXPECT_EQ(r.ngrams, 7);
  EXPECT_EQ(r.repeated, 4);
  EXPECT_DOUBLE_EQ(r.share(), 4.0 / 7.0);
}

TEST(RepetitionTest, OnlyWholeNgramsCount) {
  // The bigram (1, 2) occurs twice, but no trigram does.
  const std::vector<int32_t> t = {1, 2, 3, 1, 2, 4};
  EXPECT_EQ(CountRepeatedNgrams(t, 2).repeated, 1);
  EXPECT_EQ(CountRepeatedNgrams(t, 3).repeated, 0);
}

TEST(RepetitionTest, ShortOrInvalidInputsCountNothing) {
  const std::vector<int32_t> t = {1, 1, 1};
  EXPECT_EQ(CountRepeatedNgrams(t, 4).ngrams, 0);
  EXPECT_EQ(CountRepeatedNgrams(t, 0).ngrams, 0);
  EXPECT_EQ(CountRepeatedNgrams(t, 1).repeated, 2);
}

TEST(RepetitionTest, SumsAcrossSequences) {
  NgramRepetition total;
  total += NgramRepetition{10, 2};
  total += NgramRepetition{30, 0};
  EXPECT_EQ(total.ngrams, 40);
  EXPECT_DOUBLE_EQ(total.share(), 0.05);
}

}  // namespace
}  // namespace specdec::cli
