// Helpers shared by the tokenizer tests: the llama2.c tok512 reader and a builder of small
// byte-level tokenizer.json files.
#ifndef SPECDEC_TESTS_COMMON_TOKENIZER_TEST_UTIL_H_
#define SPECDEC_TESTS_COMMON_TOKENIZER_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/spm_convert.h"
#include "nlohmann/json.hpp"

namespace specdec::tokenizer::testing {

inline std::string Tok512Path() {
  return std::string(SPECDEC_SHARED_DIR) + "/models/stories260K/tok512.bin";
}

// Reads llama2.c's tokenizer format (int32 max_token_length, then per piece float32 score, int32
// length, bytes) into SentencePiece entries: ids 0/1/2 become <unk>/<s>/</s>, "<0xXX>" pieces are
// byte pieces, and the spaces llama2.c's exporter wrote are turned back into U+2581.
inline std::optional<std::vector<SpmVocabEntry>> ReadLlama2cTokenizer(const std::string& path,
                                                                      int n_pieces) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  size_t pos = 4;
  std::vector<SpmVocabEntry> vocab;
  for (int i = 0; i < n_pieces; ++i) {
    if (pos + 8 > data.size()) return std::nullopt;
    float score;
    int32_t len;
    std::memcpy(&score, data.data() + pos, 4);
    std::memcpy(&len, data.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || pos + len > data.size()) return std::nullopt;
    std::string piece = data.substr(pos, len);
    pos += len;
    SpmVocabEntry e;
    e.score = score;
    if (i == 0) {
      e.piece = "<unk>";
      e.type = 2;
    } else if (i == 1) {
      e.piece = "<s>";
      e.type = 3;
    } else if (i == 2) {
      e.piece = "</s>";
      e.type = 3;
    } else if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') {
      e.piece = piece;
      e.type = 6;
    } else {
      for (char c : piece) {
        if (c == ' ') {
          e.piece += "\xE2\x96\x81";
        } else {
          e.piece.push_back(c);
        }
      }
      e.type = 1;
    }
    vocab.push_back(std::move(e));
  }
  return vocab;
}

// GPT-2's bytes_to_unicode, written out independently of the library.
inline std::string Gpt2ByteChar(int b) {
  int n = 0;
  int cp = -1;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    const int this_cp = printable ? x : 256 + n++;
    if (x == b) {
      cp = this_cp;
      break;
    }
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

inline std::string ToByteLevel(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) out += Gpt2ByteChar(c);
  return out;
}

// Builds a byte-level BPE tokenizer.json: ids 0..255 are the 256 byte symbols (id = byte value);
// `decoys` (raw-text pairs) are the highest-priority merges; then every word of `words` (raw text)
// gets a left-to-right chain of merges so that it becomes one token when pre-tokenization cuts it
// out on its own.
struct ByteLevelSpec {
  std::vector<std::pair<std::string, std::string>> decoys;
  std::vector<std::string> words;
  nlohmann::json pre_tokenizer;
  nlohmann::json added_tokens = nlohmann::json::array();
  bool merges_as_pairs = false;
};

inline std::string BuildByteLevelJson(const ByteLevelSpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[Gpt2ByteChar(b)] = b;
  int next_id = 256;
  nlohmann::json merges = nlohmann::json::array();
  auto add_merge = [&](const std::string& a, const std::string& b) {
    if (!vocab.contains(a + b)) vocab[a + b] = next_id++;
    if (spec.merges_as_pairs) {
      merges.push_back(nlohmann::json::array({a, b}));
    } else {
      merges.push_back(a + " " + b);
    }
  };
  for (const auto& [a, b] : spec.decoys) add_merge(ToByteLevel(a), ToByteLevel(b));
  for (const std::string& w : spec.words) {
    std::string cur = Gpt2ByteChar(static_cast<unsigned char>(w[0]));
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string ch = Gpt2ByteChar(static_cast<unsigned char>(w[i]));
      add_merge(cur, ch);
      cur += ch;
    }
  }
  nlohmann::json added = spec.added_tokens;
  nlohmann::json root;
  root["version"] = "1.0";
  root["added_tokens"] = added;
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = spec.pre_tokenizer;
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  root["model"] = {{"type", "BPE"},     {"dropout", nullptr},     {"unk_token", nullptr},
                   {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                   {"vocab", vocab},    {"merges", merges}};
  return root.dump();
}

inline nlohmann::json Gpt2PreTokenizer() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", true}};
}

// Qwen2's split pattern (Llama-3 uses \p{N}{1,3} instead of \p{N}).
inline constexpr char kQwenPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

inline nlohmann::json QwenPreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers", nlohmann::json::array({{{"type", "Split"},
                                                    {"pattern", {{"Regex", kQwenPattern}}},
                                                    {"behavior", "Isolated"},
                                                    {"invert", false}},
                                                   {{"type", "ByteLevel"},
                                                    {"add_prefix_space", false},
                                                    {"trim_offsets", false},
                                                    {"use_regex", false}}})}};
}

}  // namespace specdec::tokenizer::testing

#endif  // SPECDEC_TESTS_COMMON_TOKENIZER_TEST_UTIL_H_
