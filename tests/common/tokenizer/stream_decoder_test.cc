#include "common/tokenizer/stream_decoder.h"

#include <string>
#include <vector>

#include "common/tokenizer/spm_convert.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "common/util/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/tokenizer/test_util.h"

namespace specdec::tokenizer {
namespace {

// Streams `ids` and checks: every piece is valid UTF-8 when `text_is_valid`, and pieces + Flush
// concatenate to Decode(ids). Returns the pieces (Flush last).
std::vector<std::string> StreamAll(const Tokenizer& t, const std::vector<int32_t>& ids,
                                   bool skip_special, bool text_is_valid) {
  StreamDecoder decoder(t, skip_special);
  std::vector<std::string> pieces;
  std::string joined;
  for (int32_t id : ids) {
    pieces.push_back(decoder.Push(id));
    if (text_is_valid) {
      EXPECT_TRUE(IsValidUtf8(pieces.back())) << "piece " << pieces.size() - 1;
    }
    joined += pieces.back();
  }
  pieces.push_back(decoder.Flush());
  joined += pieces.back();
  EXPECT_EQ(joined, t.Decode(ids, skip_special));
  return pieces;
}

const char* const kTexts[] = {
    "Once upon a time, there was a little girl named Lily.",
    "  leading spaces and trailing  ",
    "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
    "emoji \xF0\x9F\x99\x82\xF0\x9F\x9A\x80 end\n\nnext paragraph",
    "\n",
    "x",
    "12345 + 678 = ?",
};

TEST(StreamDecoderTest, SentencePieceVocabulary) {
  auto vocab = testing::ReadLlama2cTokenizer(testing::Tok512Path(), 512);
  if (!vocab.has_value()) GTEST_SKIP() << testing::Tok512Path() << " is absent";
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string json,
                               SentencePieceVocabToTokenizerJson(*vocab, 1, 2, 0));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto t, Tokenizer::FromJson(json, "tok512"));
  for (const char* text : kTexts) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode(text, true));
    StreamAll(*t, ids, true, true);
    StreamAll(*t, ids, false, true);
    // Special tokens in the middle of the stream (EOS then more text) keep spacing intact.
    std::vector<int32_t> twice = ids;
    twice.push_back(2);
    twice.insert(twice.end(), ids.begin() + 1, ids.end());
    StreamAll(*t, twice, true, true);
    StreamAll(*t, twice, false, true);
  }
  // A 4-byte character spelled with byte-fallback tokens appears only when complete.
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode("\xF0\x9F\x99\x82", true));
  ASSERT_EQ(ids.size(), 6u);  // <s> ▁ <0xF0> <0x9F> <0x99> <0x82>
  EXPECT_EQ(ids[2], 0xF0 + 3);
  std::vector<std::string> pieces = StreamAll(*t, ids, true, true);
  EXPECT_THAT(pieces, ::testing::ElementsAre("", "", "", "", "", "\xF0\x9F\x99\x82", ""));
  // Once upon: the first piece loses its leading space, later ones keep it.
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t->Encode("Once upon", true));
  pieces = StreamAll(*t, ids, true, true);
  std::string first_text;
  for (const std::string& p : pieces) {
    if (!p.empty()) {
      first_text = p;
      break;
    }
  }
  EXPECT_EQ(first_text[0], 'O');
}

TEST(StreamDecoderTest, ByteLevelVocabulary) {
  testing::ByteLevelSpec spec;
  spec.pre_tokenizer = testing::QwenPreTokenizer();
  spec.words = {" the", "\xC3\xA9", " caf\xC3\xA9", "\xE6\x97\xA5"};
  spec.added_tokens =
      nlohmann::json::array({{{"id", 500}, {"content", "<|endoftext|>"}, {"special", true}}});
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      auto t, Tokenizer::FromJson(testing::BuildByteLevelJson(spec), "byte-level"));
  for (const char* text : kTexts) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode(text, false));
    StreamAll(*t, ids, true, true);
    ids.push_back(500);
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> more, t->Encode(text, false));
    ids.insert(ids.end(), more.begin(), more.end());
    StreamAll(*t, ids, true, true);
    StreamAll(*t, ids, false, true);
  }
  // Bytes of one character arrive in separate tokens: held back until complete.
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode("a\xE2\x82\xAC!", false));
  EXPECT_THAT(StreamAll(*t, ids, true, true),
              ::testing::ElementsAre("a", "", "", "\xE2\x82\xAC", "!", ""));
  // Invalid UTF-8 is released (not held forever), and a truncated character comes out at Flush.
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t->Encode("\xFF"
                                              "a\xE2\x82",
                                              false));
  EXPECT_THAT(StreamAll(*t, ids, true, false),
              ::testing::ElementsAre("\xFF", "a", "", "", "\xE2\x82"));
}

TEST(Utf8Test, CompletePrefixLength) {
  EXPECT_EQ(Utf8CompletePrefixLength(""), 0u);
  EXPECT_EQ(Utf8CompletePrefixLength("abc"), 3u);
  EXPECT_EQ(Utf8CompletePrefixLength("a\xE2\x82"), 1u);
  EXPECT_EQ(Utf8CompletePrefixLength("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(Utf8CompletePrefixLength("a\xF0\x9F\x99"), 1u);
  EXPECT_EQ(Utf8CompletePrefixLength("a\xF0"), 1u);
  EXPECT_EQ(Utf8CompletePrefixLength("a\x80"), 2u);  // Stray continuation: nothing to wait for.
  EXPECT_EQ(Utf8CompletePrefixLength("a\xE2"
                                     "b"),
            3u);  // Broken sequence: released.
}

}  // namespace
}  // namespace specdec::tokenizer
