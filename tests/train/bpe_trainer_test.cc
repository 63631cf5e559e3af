// The byte-level BPE trainer: its tokenizer.json loads in common/tokenizer, ids follow the stated
// order (specials, 256 bytes, merges), frequent words become single tokens, and any text
// round-trips through encode and decode.
#include "train/bpe_trainer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "common/util/status_matchers.h"

namespace specdec::train {
namespace {

TEST(BpeTrainerTest, TrainedTokenizerLoadsAndRoundTrips) {
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    texts.push_back("def add(a, b):\n    return a + b\n\nprint(add(" + std::to_string(i) +
                    ", 2))\n");
  }
  BpeTrainerOptions o;
  o.vocab_size = 300;
  SPECDEC_ASSERT_OK_AND_ASSIGN(BpeTokenizerFiles files, TrainByteLevelBpe(texts, o));
  EXPECT_GT(files.num_merges, 10);  // stops early once no pair occurs twice
  EXPECT_LE(files.num_merges, 300 - 256 - 4);
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      auto tok,
      tokenizer::Tokenizer::FromJson(files.tokenizer_json, "trained", files.tokenizer_config_json));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> bos_only, tok->Encode("", true));
  EXPECT_EQ(bos_only, std::vector<int32_t>{0});  // <|bos|> is id 0
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ret, tok->Encode("    return", false));
  EXPECT_LE(ret.size(), 2u);  // a frequent word and its indentation are merged
  for (const std::string& text :
       {texts[7], std::string("unseen ünïcode 🙂 text\t\r\n"), std::string("<|eos|>")}) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok->Encode(text, false));
    for (int32_t id : ids) EXPECT_LT(id, 300);
    EXPECT_EQ(tok->Decode(ids, /*skip_special_tokens=*/false), text);
  }
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> eos, tok->Encode("<|eos|>", false));
  EXPECT_EQ(eos, std::vector<int32_t>{1});
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> a, tok->Encode("a", false));
  EXPECT_EQ(a, std::vector<int32_t>{
                   4 + 'a'});  // byte symbols follow the 4 specials (GPT-2 maps 'a' to itself)
}

}  // namespace
}  // namespace specdec::train
