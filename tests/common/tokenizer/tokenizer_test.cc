#include "common/tokenizer/tokenizer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "common/util/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/tokenizer/test_util.h"

namespace specdec::tokenizer {
namespace {

using testing::BuildByteLevelJson;
using testing::ByteLevelSpec;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::ToByteLevel;

std::unique_ptr<Tokenizer> MustLoad(const std::string& json, std::string_view config = "") {
  auto t = Tokenizer::FromJson(json, "test.json", config);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

int32_t Id(const Tokenizer& t, const std::string& raw) {
  std::optional<int32_t> id = t.TokenToId(ToByteLevel(raw));
  EXPECT_TRUE(id.has_value()) << "no piece for '" << raw << "'";
  return id.value_or(-1);
}

std::vector<int32_t> Bytes(std::string_view s) {
  std::vector<int32_t> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

TEST(ByteLevelTest, MappingMatchesGpt2) {
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(ByteToUnicode('A'), "A");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(ByteToUnicode(static_cast<uint8_t>(b)), testing::Gpt2ByteChar(b)) << b;
  }
}

TEST(ByteLevelBpeTest, Gpt2RegexSplitsLikeHf) {
  // Decoys are top-priority merges across the boundaries of the expected GPT-2 chunks: they only
  // fire when pre-tokenization fails to cut there.
  ByteLevelSpec spec;
  spec.decoys = {{"o", " "}, {"d", "'"},  {"s", " "}, {"3", " "},
                 {"e", "'"}, {"l", "\n"}, {" ", " "}};
  spec.words = {"Hello", " world", "'s", " 123", " he", "'ll", "\n\n ", " x"};
  spec.pre_tokenizer = testing::Gpt2PreTokenizer();
  auto t = MustLoad(BuildByteLevelJson(spec));
  ASSERT_NE(t, nullptr);
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids,
                               t->Encode("Hello world's 123 he'll\n\n  x", false));
  EXPECT_THAT(ids, ElementsAre(Id(*t, "Hello"), Id(*t, " world"), Id(*t, "'s"), Id(*t, " 123"),
                               Id(*t, " he"), Id(*t, "'ll"), Id(*t, "\n\n "), Id(*t, " x")));
  // GPT-2's contractions are case-sensitive: "'S" is not one, so "'" and "S" stay apart from the
  // letters before them only through the " ?[^\s\p{L}\p{N}]+" branch.
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t->Encode("d'S", false));
  EXPECT_THAT(ids, ElementsAre('d', '\'', 'S'));
  EXPECT_EQ(t->Decode(ids), "d'S");
}

TEST(ByteLevelBpeTest, QwenSplitRegexVariant) {
  ByteLevelSpec spec;
  spec.decoys = {{"T", "'"}, {"S", " "}, {" ", "1"},  {"1", "2"}, {"2", "3"},
                 {"3", "4"}, {"4", " "}, {"o", "\n"}, {"\n", "w"}};
  spec.words = {"IT", "'S", " hello", "\n\n", "world"};
  spec.pre_tokenizer = testing::QwenPreTokenizer();
  auto t = MustLoad(BuildByteLevelJson(spec));
  ASSERT_NE(t, nullptr);
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids,
                               t->Encode("IT'S 1234 hello\n\nworld", false));
  EXPECT_THAT(ids, ElementsAre(Id(*t, "IT"), Id(*t, "'S"), ' ', '1', '2', '3', '4',
                               Id(*t, " hello"), Id(*t, "\n\n"), Id(*t, "world")));
  EXPECT_EQ(t->Decode(ids), "IT'S 1234 hello\n\nworld");
}

TEST(ByteLevelBpeTest, MergeRankDecidesOrder) {
  for (bool as_pairs : {false, true}) {
    ByteLevelSpec ab_first;
    ab_first.decoys = {{"a", "b"}, {"b", "c"}};
    ab_first.pre_tokenizer = testing::Gpt2PreTokenizer();
    ab_first.merges_as_pairs = as_pairs;
    auto t1 = MustLoad(BuildByteLevelJson(ab_first));
    ASSERT_NE(t1, nullptr);
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t1->Encode("abc", false));
    EXPECT_THAT(ids, ElementsAre(Id(*t1, "ab"), 'c'));

    ByteLevelSpec bc_first = ab_first;
    bc_first.decoys = {{"b", "c"}, {"a", "b"}};
    auto t2 = MustLoad(BuildByteLevelJson(bc_first));
    ASSERT_NE(t2, nullptr);
    SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t2->Encode("abc", false));
    EXPECT_THAT(ids, ElementsAre('a', Id(*t2, "bc")));
    // Equal-rank candidates: the leftmost pair merges first ("aaa" -> "aa" "a").
    SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t2->Encode("bcbc", false));
    EXPECT_THAT(ids, ElementsAre(Id(*t2, "bc"), Id(*t2, "bc")));
  }
  ByteLevelSpec chain;
  chain.decoys = {{"a", "a"}};
  chain.pre_tokenizer = testing::Gpt2PreTokenizer();
  auto t3 = MustLoad(BuildByteLevelJson(chain));
  ASSERT_NE(t3, nullptr);
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t3->Encode("aaa", false));
  EXPECT_THAT(ids, ElementsAre(Id(*t3, "aa"), 'a'));
}

nlohmann::json AddedToken(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

TEST(ByteLevelBpeTest, AddedSpecialTokensAreSplitOut) {
  ByteLevelSpec spec;
  spec.pre_tokenizer = testing::Gpt2PreTokenizer();
  spec.words = {" there"};
  spec.added_tokens =
      nlohmann::json::array({AddedToken(1000, "<|endoftext|>", true),
                             AddedToken(1001, "<|end|>", true), AddedToken(1002, "<tool>", false)});
  auto t = MustLoad(BuildByteLevelJson(spec));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 1003);
  EXPECT_EQ(t->eos_id(), 1000);
  EXPECT_FALSE(t->bos_id().has_value());
  EXPECT_FALSE(t->add_bos_by_default());
  EXPECT_TRUE(t->IsSpecial(1000));
  EXPECT_FALSE(t->IsSpecial(1002));
  EXPECT_FALSE(t->IsSpecial('a'));
  EXPECT_EQ(t->IdToPiece(1000), "<|endoftext|>");
  EXPECT_EQ(t->TokenToId("<|end|>"), 1001);

  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids,
                               t->Encode("hi<|endoftext|> there<|end|><tool>", false));
  EXPECT_THAT(ids, ElementsAre('h', 'i', 1000, Id(*t, " there"), 1001, 1002));
  EXPECT_EQ(t->Decode(ids, /*skip_special_tokens=*/false), "hi<|endoftext|> there<|end|><tool>");
  EXPECT_EQ(t->Decode(ids), "hi there<tool>");
  // A partial special token is ordinary text.
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t->Encode("<|endof", false));
  EXPECT_EQ(ids.size(), 7u);
  EXPECT_EQ(t->Decode(ids), "<|endof");
  // No BOS token: asking for one fails cleanly.
  SPECDEC_EXPECT_STATUS(t->Encode("x", true), absl::StatusCode::kFailedPrecondition, "BOS");
}

TEST(ByteLevelBpeTest, RoundTripsNonAsciiAndInvalidUtf8) {
  for (const auto& pre : {testing::Gpt2PreTokenizer(), testing::QwenPreTokenizer()}) {
    ByteLevelSpec spec;
    spec.pre_tokenizer = pre;
    spec.words = {" the", "\xC3\xA9"};
    auto t = MustLoad(BuildByteLevelJson(spec));
    ASSERT_NE(t, nullptr);
    for (std::string s :
         {std::string("h\xC3\xA9llo w\xC3\xB6rld \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x99\x82!"),
          std::string("\xFF\xFE inv\x80"
                      "alid \xC3"),
          std::string("tabs\tand\r\nnewlines"), std::string("  multiple   spaces  "),
          std::string("caf\xC3\xA9 the end\n"), std::string("\0zero\0", 6), std::string("")}) {
      SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode(s, false));
      EXPECT_EQ(t->Decode(ids), s);
      SPECDEC_EXPECT_OK(t->ValidateIds(ids));
    }
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode("caf\xC3\xA9", false));
    EXPECT_THAT(ids, ElementsAre('c', 'a', 'f', Id(*t, "\xC3\xA9")));
    // Without the merge the bytes would be 0xC3 0xA9; invalid bytes map one-to-one.
    SPECDEC_ASSERT_OK_AND_ASSIGN(ids, t->Encode("\xFF\x80", false));
    EXPECT_THAT(ids, ElementsAreArray(Bytes("\xFF\x80")));
  }
}

TEST(ByteLevelBpeTest, IgnoreMergesUsesWholeWordPiece) {
  ByteLevelSpec spec;
  spec.pre_tokenizer = testing::Gpt2PreTokenizer();
  spec.decoys = {{"a", "b"}, {"b", "c"}, {"a", "bc"}};  // "abc" exists but BPE reaches "ab" "c".
  nlohmann::json j = nlohmann::json::parse(BuildByteLevelJson(spec));
  auto plain = MustLoad(j.dump());
  ASSERT_NE(plain, nullptr);
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, plain->Encode("abc", false));
  EXPECT_THAT(ids, ElementsAre(Id(*plain, "ab"), 'c'));
  j["model"]["ignore_merges"] = true;
  auto llama3 = MustLoad(j.dump());
  ASSERT_NE(llama3, nullptr);
  SPECDEC_ASSERT_OK_AND_ASSIGN(ids, llama3->Encode("abc", false));
  EXPECT_THAT(ids, ElementsAre(Id(*llama3, "abc")));
}

TEST(ByteLevelBpeTest, EncodeIsThreadSafe) {
  ByteLevelSpec spec;
  spec.pre_tokenizer = testing::QwenPreTokenizer();
  spec.words = {" the", " quick", " brown", " fox"};
  auto t = MustLoad(BuildByteLevelJson(spec));
  ASSERT_NE(t, nullptr);
  const std::string text = "the quick brown fox jumps over the lazy dog 12345 times\n";
  SPECDEC_ASSERT_OK_AND_ASSIGN(const std::vector<int32_t> want, t->Encode(text, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 300; ++i) {
        auto got = t->Encode(text + std::to_string(i % 7), false);
        if (!got.ok() || got->size() != want.size() + 1 ||
            !std::equal(want.begin(), want.end(), got->begin())) {
          ++mismatches[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

TEST(TokenizerTest, FromFileReadsSiblingConfig) {
  ByteLevelSpec spec;
  spec.pre_tokenizer = testing::Gpt2PreTokenizer();
  spec.added_tokens = nlohmann::json::array(
      {AddedToken(300, "<|im_start|>", true), AddedToken(301, "<|im_end|>", true)});
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("specdec_tok_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << BuildByteLevelJson(spec);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"content": "<|im_start|>", "lstrip": false}, "eos_token": "<|im_end|>",
             "pad_token": null, "add_bos_token": true})";
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto t, Tokenizer::FromFile((dir / "tokenizer.json").string()));
  EXPECT_EQ(t->bos_id(), 300);
  EXPECT_EQ(t->eos_id(), 301);
  EXPECT_FALSE(t->pad_id().has_value());
  EXPECT_TRUE(t->add_bos_by_default());
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode("a", true));
  EXPECT_THAT(ids, ElementsAre(300, 'a'));

  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<nope>"})";
  SPECDEC_EXPECT_STATUS(Tokenizer::FromFile((dir / "tokenizer.json").string()),
                        absl::StatusCode::kInvalidArgument, "bos_token");
  std::filesystem::remove_all(dir);
  SPECDEC_EXPECT_STATUS(Tokenizer::FromFile((dir / "tokenizer.json").string()),
                        absl::StatusCode::kNotFound, "tokenizer.json");
}

TEST(TokenizerTest, ValidateIdsRejectsOutOfRange) {
  ByteLevelSpec spec;
  spec.pre_tokenizer = testing::Gpt2PreTokenizer();
  auto t = MustLoad(BuildByteLevelJson(spec));
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->vocab_size(), 256);
  SPECDEC_EXPECT_OK(t->ValidateIds(std::vector<int32_t>{0, 255}));
  SPECDEC_EXPECT_STATUS(t->ValidateIds(std::vector<int32_t>{5, -1}),
                        absl::StatusCode::kInvalidArgument, "-1");
  SPECDEC_EXPECT_STATUS(t->ValidateIds(std::vector<int32_t>{-1}),
                        absl::StatusCode::kInvalidArgument, "256");
  SPECDEC_EXPECT_STATUS(t->ValidateIds(std::vector<int32_t>{256}),
                        absl::StatusCode::kInvalidArgument, "token id 256");
  // Decode skips out-of-range ids rather than failing.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{'a', -1, 256, 'b'}), "ab");
  EXPECT_EQ(t->IdToPiece(-1), "");
  EXPECT_EQ(t->IdToPiece(256), "");
}

// ---- Malformed inputs ---------------------------------------------------------------------------

nlohmann::json MinimalJson() {
  return nlohmann::json::parse(R"({
    "added_tokens": [],
    "normalizer": null,
    "pre_tokenizer": null,
    "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
  })");
}

void ExpectInvalid(const std::string& json, const std::string& what) {
  auto t = Tokenizer::FromJson(json, "bad/tokenizer.json");
  ASSERT_FALSE(t.ok()) << what;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr("bad/tokenizer.json"));
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr(what));
}

TEST(TokenizerErrorsTest, MinimalIsValid) {
  auto t = MustLoad(MinimalJson().dump());
  ASSERT_NE(t, nullptr);
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t->Encode("abba", false));
  EXPECT_THAT(ids, ElementsAre(2, 1, 0));
  EXPECT_EQ(t->Decode(ids), "ab b a");  // No decoder: pieces joined by spaces, as in HF.
}

TEST(TokenizerErrorsTest, MalformedInputsNameOriginAndProblem) {
  ExpectInvalid("{ not json", "invalid JSON");
  ExpectInvalid("[1, 2]", "must be a JSON object");
  ExpectInvalid(R"({"added_tokens": []})", "missing 'model'");

  nlohmann::json j = MinimalJson();
  j["model"]["type"] = "WordPiece";
  ExpectInvalid(j.dump(), "model.type: unsupported model type 'WordPiece'");
  j["model"]["type"] = "Unigram";
  ExpectInvalid(j.dump(), "Unigram");

  j = MinimalJson();
  j["model"]["merges"] = {"a b", "a c"};
  ExpectInvalid(j.dump(), "model.merges[1]: merge piece 'c' is not in the vocab");
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"b", "a"})});
  ExpectInvalid(j.dump(), "merged piece 'ba' is not in the vocab");
  j["model"]["merges"] = {"a b c"};
  ExpectInvalid(j.dump(), "model.merges[0]");

  j = MinimalJson();
  j["model"]["vocab"]["c"] = 1;
  ExpectInvalid(j.dump(), "duplicate id 1");
  j = MinimalJson();
  j["model"]["vocab"]["c"] = -3;
  ExpectInvalid(j.dump(), "negative id -3");
  j = MinimalJson();
  j["model"]["vocab"]["c"] = "7";
  ExpectInvalid(j.dump(), "must be an integer");
  j = MinimalJson();
  j["added_tokens"] = {AddedToken(1, "<x>", true)};
  ExpectInvalid(j.dump(), "duplicate id 1");
  j["added_tokens"] = {AddedToken(-1, "<x>", true)};
  ExpectInvalid(j.dump(), "added_tokens[0]: negative id -1");

  j = MinimalJson();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectInvalid(j.dump(), "pre_tokenizer: unsupported pre_tokenizer type 'Whitespace'");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {testing::Gpt2PreTokenizer(), {{"type", "Digits"}}}}};
  ExpectInvalid(j.dump(),
                "pre_tokenizer.pretokenizers[1]: unsupported pre_tokenizer type 'Digits'");
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  ExpectInvalid(j.dump(), "pre_tokenizer.pattern");

  j = MinimalJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  ExpectInvalid(j.dump(), "normalizer: unsupported normalizer type 'Lowercase'");
  j = MinimalJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectInvalid(j.dump(), "decoder: unsupported decoder type 'WordPiece'");
  j = MinimalJson();
  j["model"]["unk_token"] = "<unk>";
  ExpectInvalid(j.dump(), "model.unk_token");
  j = MinimalJson();
  j["model"]["vocab"] = nlohmann::json::object();
  ExpectInvalid(j.dump(), "empty vocabulary");
  j = MinimalJson();
  j["model"]["vocab"] = nlohmann::json::array();
  ExpectInvalid(j.dump(), "model.vocab");

  auto bad_config = Tokenizer::FromJson(MinimalJson().dump(), "bad/tokenizer.json", "{oops");
  SPECDEC_EXPECT_STATUS(bad_config, absl::StatusCode::kInvalidArgument, "invalid JSON");
  bad_config =
      Tokenizer::FromJson(MinimalJson().dump(), "bad/tokenizer.json", R"({"eos_token": 5})");
  SPECDEC_EXPECT_STATUS(bad_config, absl::StatusCode::kInvalidArgument, "eos_token");
}

}  // namespace
}  // namespace specdec::tokenizer
