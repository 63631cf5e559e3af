#include "common/engine/stop_rule.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "tests/common/tokenizer/test_util.h"

namespace specdec::engine {
namespace {

TEST(StopRuleTest, KeepsTokensUpToTheLength) {
  StopRule rule(5, {});
  const std::vector<int32_t> a = {1, 2, 3}, b = {4, 5, 6, 7};
  EXPECT_EQ(rule.Take(a), 3u);
  EXPECT_FALSE(rule.finished());
  EXPECT_EQ(rule.tokens_left(), 2);
  EXPECT_EQ(rule.Take(b), 2u);
  EXPECT_TRUE(rule.finished());
  EXPECT_FALSE(rule.stopped());
  EXPECT_EQ(rule.stop_token(), -1);
  EXPECT_EQ(rule.Take(a), 0u);  // nothing after the end
}

TEST(StopRuleTest, AStopTokenEndsGenerationAndIsNotKept) {
  const std::vector<int32_t> stops = {9, 4};
  StopRule rule(100, stops);
  const std::vector<int32_t> step = {1, 2, 4, 5};
  EXPECT_EQ(rule.Take(step), 2u);
  EXPECT_TRUE(rule.finished());
  EXPECT_TRUE(rule.stopped());
  EXPECT_EQ(rule.stop_token(), 4);
  // A stop token first in a step keeps nothing of it.
  StopRule first(100, stops);
  const std::vector<int32_t> lead = {9, 1};
  EXPECT_EQ(first.Take(lead), 0u);
  EXPECT_EQ(first.stop_token(), 9);
}

TEST(StopRuleTest, TheLengthEndsBeforeALaterStopToken) {
  const std::vector<int32_t> stops = {3};
  StopRule rule(2, stops);
  const std::vector<int32_t> step = {1, 2, 3};
  EXPECT_EQ(rule.Take(step), 2u);
  EXPECT_TRUE(rule.finished());
  EXPECT_FALSE(rule.stopped());
}

// A byte-level tokenizer without merges: token id = byte value.
const tokenizer::Tokenizer& Bytes() {
  static const auto* tok = [] {
    tokenizer::testing::ByteLevelSpec spec;
    spec.pre_tokenizer = tokenizer::testing::Gpt2PreTokenizer();
    return tokenizer::Tokenizer::FromJson(tokenizer::testing::BuildByteLevelJson(spec), "bytes")
        ->release();
  }();
  return *tok;
}

std::vector<int32_t> Ids(const std::string& text) { return {text.begin(), text.end()}; }

TEST(TextStopTest, TextEndsBeforeTheFirstStopString) {
  TextStop stop(Bytes(), {"\n\n", "END"});
  std::string out;
  for (int32_t id : Ids("ab\ncdEN")) out += stop.Push(id);
  EXPECT_EQ(out, "ab\ncd");  // "EN" may still begin "END": held back
  EXPECT_FALSE(stop.matched());
  out += stop.Push('D');
  EXPECT_TRUE(stop.matched());
  EXPECT_EQ(stop.stop_string(), "END");
  EXPECT_EQ(out, "ab\ncd");
  EXPECT_EQ(stop.Push('x'), "");
  EXPECT_EQ(stop.Flush(), "");
}

TEST(TextStopTest, HeldTextIsReleasedWhenItCannotMatchAndAtTheEnd) {
  TextStop stop(Bytes(), {"xyz"});
  EXPECT_EQ(stop.Push('a'), "a");
  EXPECT_EQ(stop.Push('x'), "");
  EXPECT_EQ(stop.Push('y'), "");
  EXPECT_EQ(stop.Push('q'), "xyq");
  EXPECT_EQ(stop.Push('x'), "");
  EXPECT_EQ(stop.Flush(), "x");
  EXPECT_FALSE(stop.matched());
}

TEST(StopRuleTest, AStopStringKeepsTheTokenThatCompletesIt) {
  const std::vector<int32_t> no_ids;
  StopRule rule(100, no_ids, std::make_unique<TextStop>(Bytes(), std::vector<std::string>{"cd"}));
  std::string text;
  EXPECT_EQ(rule.Take(Ids("abc"), &text), 3u);
  EXPECT_FALSE(rule.finished());
  EXPECT_EQ(rule.Take(Ids("def"), &text), 1u);  // "d" completes the match; "ef" is not kept
  EXPECT_TRUE(rule.stopped());
  EXPECT_EQ(rule.stop_token(), -1);
  EXPECT_EQ(rule.stop_string(), "cd");
  EXPECT_EQ(text, "ab");
  EXPECT_EQ(rule.FlushText(), "");
}

}  // namespace
}  // namespace specdec::engine
