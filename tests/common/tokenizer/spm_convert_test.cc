#include "common/tokenizer/spm_convert.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/tokenizer/test_util.h"

namespace specdec::tokenizer {
namespace {

using ::testing::ElementsAre;

constexpr char kSpace[] = "\xE2\x96\x81";  // U+2581

// Straightforward reimplementation of llama2.c's `encode` (dummy prefix, per-character pieces
// with byte fallback to id byte+3, then repeatedly merge the adjacent pair whose concatenation is
// in the vocabulary with the highest score, leftmost on ties).
std::vector<int32_t> Llama2cEncode(const std::vector<SpmVocabEntry>& vocab, std::string_view text) {
  absl::flat_hash_map<std::string, int32_t> ids;
  for (size_t i = 0; i < vocab.size(); ++i) ids.emplace(vocab[i].piece, static_cast<int32_t>(i));
  std::vector<int32_t> tokens;
  if (text.empty()) return tokens;
  std::string s = kSpace;
  for (char c : text) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s.push_back(c);
    }
  }
  std::string buf;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80) buf.clear();
    buf.push_back(static_cast<char>(c));
    if (i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80 &&
        buf.size() < 4) {
      continue;
    }
    if (auto it = ids.find(buf); it != ids.end()) {
      tokens.push_back(it->second);
    } else {
      for (unsigned char b : buf) tokens.push_back(b + 3);
    }
    buf.clear();
  }
  while (true) {
    float best_score = -1e10f;
    int best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      auto it = ids.find(vocab[tokens[i]].piece + vocab[tokens[i + 1]].piece);
      if (it != ids.end() && vocab[it->second].score > best_score) {
        best_score = vocab[it->second].score;
        best_id = it->second;
        best_idx = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  return tokens;
}

const std::vector<std::string>& Sentences() {
  static const auto* const kSentences = new std::vector<std::string>{
      "Once upon a time",
      "Once upon a time, there was a little girl named Lily.",
      "Hello world",
      "",
      " ",
      "  two leading spaces",
      "trailing  ",
      "a  b   c",
      "a\nb",
      "\n\n",
      "The cat sat on the mat.\nThe dog barked.",
      "Lily and Tom went to the park. They saw a big red ball!",
      "12345",
      "3.14159 and 2,718",
      "Hi! How are you?",
      "\"Yes,\" said Mom. 'OK'",
      "(parens) [brackets] {braces}",
      "a-b_c x=y+z*2/3 100%",
      "UPPERCASE WORDS",
      "MiXeD CaSe",
      "#hashtag @user ~tilde` ^caret |pipe \\back",
      "...!!!???",
      "caf\xC3\xA9",
      "na\xC3\xAFve r\xC3\xA9sum\xC3\xA9",
      "\xC3\x9Cn\xC3\xAF"
      "c\xC3\xB6"
      "d\xC3\xA9 \xC3\xB1",
      "emoji \xF0\x9F\x99\x82\xF0\x9F\x9A\x80 end",
      "\xF0\x9F\x99\x82",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "tab\there",
      "\r\nwindows line",
      "trademark\xE2\x84\xA2 and hair\xE2\x80\x8Aspace",
      "once upon a time there was a little boy who liked to play with his toys",
      "She was very happy. The end.",
      "x",
  };
  return *kSentences;
}

class Tok512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto vocab = testing::ReadLlama2cTokenizer(testing::Tok512Path(), 512);
    if (!vocab.has_value()) {
      GTEST_SKIP() << "pretrained vocabulary " << testing::Tok512Path()
                   << " is absent or unreadable; skipping the stories260K tokenizer checks";
    }
    vocab_ = std::move(*vocab);
    auto json = SentencePieceVocabToTokenizerJson(vocab_, 1, 2, 0);
    ASSERT_TRUE(json.ok()) << json.status();
    json_ = *json;
    auto t = Tokenizer::FromJson(json_, "tok512.bin (converted)");
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(t).value();
  }

  std::vector<SpmVocabEntry> vocab_;
  std::string json_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Tok512Test, EncodeMatchesLlama2c) {
  ASSERT_GE(Sentences().size(), 30u);
  for (const std::string& s : Sentences()) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok_->Encode(s, false));
    EXPECT_EQ(ids, Llama2cEncode(vocab_, s)) << "text: '" << s << "'";
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> with_bos, tok_->Encode(s, true));
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], 1);
    EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), ids);
  }
}

TEST_F(Tok512Test, DecodeInvertsEncode) {
  for (const std::string& s : Sentences()) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok_->Encode(s, true));
    EXPECT_EQ(tok_->Decode(ids), s);
    SPECDEC_EXPECT_OK(tok_->ValidateIds(ids));
  }
}

TEST_F(Tok512Test, KnownIds) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->unk_id(), 0);
  EXPECT_TRUE(tok_->add_bos_by_default());
  EXPECT_TRUE(tok_->IsSpecial(1));
  EXPECT_TRUE(tok_->IsSpecial(2));
  EXPECT_FALSE(tok_->IsSpecial(13));
  EXPECT_EQ(tok_->TokenToId("<0x0A>"), 13);
  EXPECT_EQ(tok_->IdToPiece(1), "<s>");
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok_->Encode("\n", false));
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 13);
  // A leading "▁" of the first piece is dropped (as llama2.c and HF do), later ones are spaces.
  const std::optional<int32_t> the = tok_->TokenToId(std::string(kSpace) + "the");
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{1, *the}), "the");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{1, *the, *the, 2}), "the the");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{1, *the}, /*skip_special_tokens=*/false), "<s> the");
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, tok_->Encode("Once upon a time", true));
  EXPECT_EQ(tok_->Decode(ids), "Once upon a time");
  SPECDEC_EXPECT_STATUS(tok_->ValidateIds(std::vector<int32_t>{1, 512}),
                        absl::StatusCode::kInvalidArgument, "512");
}

TEST_F(Tok512Test, MetaspacePreTokenizerVariantEncodesTheSame) {
  // Newer Llama-2 tokenizer.json files use a Metaspace pre-tokenizer instead of the normalizer.
  nlohmann::json j = nlohmann::json::parse(json_);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", kSpace},
                        {"prepend_scheme", "first"},
                        {"split", false}};
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto metaspace, Tokenizer::FromJson(j.dump(), "metaspace.json"));
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", kSpace},
                        {"add_prefix_space", true}};  // Old form: split on ▁, always prepend.
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "ByteFallback"}},
                    {{"type", "Metaspace"}, {"replacement", kSpace}, {"add_prefix_space", true}}}}};
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto old_form, Tokenizer::FromJson(j.dump(), "metaspace-old.json"));
  for (const std::string& s : Sentences()) {
    // HF's Metaspace does not prepend to text that already starts with a space (unlike the
    // legacy Prepend normalizer), so those texts legitimately differ.
    if (!s.empty() && s[0] == ' ') continue;
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> want, tok_->Encode(s, false));
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> got, metaspace->Encode(s, false));
    EXPECT_EQ(got, want) << s;
    // Splitting on ▁ only forbids merges across a space, which this vocabulary never has.
    SPECDEC_ASSERT_OK_AND_ASSIGN(got, old_form->Encode(s, false));
    EXPECT_EQ(got, want) << s;
    EXPECT_EQ(old_form->Decode(got), s);
  }
}

// ---- Converter on a hand-made vocabulary -------------------------------------------------------

std::vector<SpmVocabEntry> SmallVocab() {
  return {
      {"<unk>", 0, 2},  {"<s>", 0, 3},     {"</s>", 0, 3},   {kSpace, -1.0f, 1},
      {"a", -2.0f, 1},  {"b", -3.0f, 1},   {"c", -4.0f, 1},  {"ab", -0.5f, 1},
      {"bc", -0.2f, 1}, {"abc", -0.1f, 1}, {"<0x0A>", 0, 6},
  };
}

TEST(SpmConvertTest, MergesRankedByScoreThenIds) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string text,
                               SentencePieceVocabToTokenizerJson(SmallVocab(), 1, 2, 0));
  nlohmann::json j = nlohmann::json::parse(text);
  const nlohmann::json want =
      nlohmann::json::parse(R"([["a", "bc"], ["ab", "c"], ["b", "c"], ["a", "b"]])");
  EXPECT_EQ(j["model"]["merges"], want);
  EXPECT_EQ(j["model"]["vocab"]["<0x0A>"], 10);
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  EXPECT_EQ(j["added_tokens"].size(), 3u);
  EXPECT_EQ(j["post_processor"]["special_tokens"]["<s>"]["ids"][0], 1);

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto t, Tokenizer::FromJson(text, "small"));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode("abc\nab z", true));
  // "▁abc\nab▁z": z is unknown and has no byte piece, so it becomes <unk>.
  EXPECT_THAT(ids, ElementsAre(1, 3, 9, 10, 7, 3, 0));
  EXPECT_EQ(t->Decode(ids), "abc\nab ");
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t->Encode("zz", false));
  EXPECT_THAT(ids, ElementsAre(3, 0));  // fuse_unk: consecutive unknowns give one <unk>.
}

TEST(SpmConvertTest, RejectsBadVocabularies) {
  SPECDEC_EXPECT_STATUS(SentencePieceVocabToTokenizerJson({}, 1, 2, 0),
                        absl::StatusCode::kInvalidArgument, "empty");
  std::vector<SpmVocabEntry> dup = SmallVocab();
  dup.push_back({"ab", -9.0f, 1});
  SPECDEC_EXPECT_STATUS(SentencePieceVocabToTokenizerJson(dup, 1, 2, 0),
                        absl::StatusCode::kInvalidArgument, "duplicate piece 'ab'");
  SPECDEC_EXPECT_STATUS(SentencePieceVocabToTokenizerJson(SmallVocab(), 99, 2, 0),
                        absl::StatusCode::kInvalidArgument, "bos id 99");
  SPECDEC_EXPECT_STATUS(SentencePieceVocabToTokenizerJson(SmallVocab(), 1, -5, 0),
                        absl::StatusCode::kInvalidArgument, "eos id -5");
}

}  // namespace
}  // namespace specdec::tokenizer
