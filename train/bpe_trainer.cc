#include "train/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/io/gguf_bpe_vocab.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/regex.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::train {
namespace {

using Pair = std::pair<int32_t, int32_t>;

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string ByteLevelString(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += tokenizer::ByteToUnicode(c);
  return out;
}

}  // namespace

absl::StatusOr<BpeTokenizerFiles> TrainByteLevelBpe(std::span<const std::string> texts,
                                                    const BpeTrainerOptions& o) {
  const int32_t n_special = static_cast<int32_t>(o.special_tokens.size());
  if (o.vocab_size <= 256 + n_special) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must exceed 256 + ", n_special,
                                                   " special tokens, got ", o.vocab_size));
  }
  if (texts.empty()) return absl::InvalidArgumentError("no training text");
  ASSIGN_OR_RETURN(auto regex, tokenizer::Regex::Compile(kQwen2SplitPattern, false));

  // ---- pre-tokenize (Split with Isolated behaviour: matches and the gaps between them).
  absl::flat_hash_map<std::string, int64_t> word_counts;
  for (const std::string& text : texts) {
    size_t pos = 0;
    for (const auto& [b, e] : regex->FindAll(text)) {
      if (b > pos) ++word_counts[text.substr(pos, b - pos)];
      ++word_counts[text.substr(b, e - b)];
      pos = e;
    }
    if (pos < text.size()) ++word_counts[text.substr(pos)];
  }
  if (word_counts.empty()) return absl::InvalidArgumentError("training text is empty");
  // Deterministic word order.
  std::vector<std::pair<std::string, int64_t>> sorted(word_counts.begin(), word_counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (unsigned char c : sorted[w].first) words[w].push_back(c);
    freq[w] = sorted[w].second;
  }
  std::vector<std::string> symbols(256);
  for (int i = 0; i < 256; ++i) symbols[i] = std::string(1, static_cast<char>(i));

  absl::flat_hash_map<uint64_t, int64_t> counts;
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t k = Key(words[w][i], words[w][i + 1]);
      counts[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(w);
    }
  }
  // Max-heap on (count, then the smaller byte strings first); stale entries are skipped.
  struct Entry {
    int64_t count;
    int32_t a, b;
  };
  auto less = [&](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    return std::tie(symbols[x.a], symbols[x.b]) > std::tie(symbols[y.a], symbols[y.b]);
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(less)> heap(less);
  for (const auto& [k, c] : counts) {
    heap.push({c, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xffffffffu)});
  }
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int32_t> visited(words.size(), -1);
  const int32_t max_merges = o.vocab_size - 256 - n_special;
  absl::flat_hash_map<uint64_t, int64_t> delta;
  while (static_cast<int32_t>(merges.size()) < max_merges && !heap.empty()) {
    Entry top = heap.top();
    heap.pop();
    const uint64_t key = Key(top.a, top.b);
    auto it = counts.find(key);
    if (it == counts.end() || it->second != top.count) continue;  // stale
    if (top.count < o.min_pair_frequency) break;
    const int32_t z = static_cast<int32_t>(symbols.size());
    symbols.push_back(symbols[top.a] + symbols[top.b]);
    const int32_t merge_id = static_cast<int32_t>(merges.size());
    merges.emplace_back(top.a, top.b);
    delta.clear();
    std::vector<int32_t> list = std::move(where[key]);
    where.erase(key);
    for (int32_t w : list) {
      if (visited[w] == merge_id) continue;
      visited[w] = merge_id;
      std::vector<int32_t>& s = words[w];
      bool has = false;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] == top.a && s[i + 1] == top.b) {
          has = true;
          break;
        }
      }
      if (!has) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[Key(s[i], s[i + 1])] -= freq[w];
      std::vector<int32_t> merged;
      merged.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == top.a && s[i + 1] == top.b) {
          merged.push_back(z);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s = std::move(merged);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t k = Key(s[i], s[i + 1]);
        delta[k] += freq[w];
        auto& wl = where[k];
        if (wl.empty() || wl.back() != w) wl.push_back(w);
      }
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& c = counts[k];
      c += d;
      if (c <= 0) {
        counts.erase(k);
      } else {
        heap.push({c, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xffffffffu)});
      }
    }
    counts.erase(key);
  }

  // ---- tokenizer.json (common/io writes the byte-level BPE layout)
  io::GgufBpeVocab v;
  for (int32_t i = 0; i < n_special; ++i) {
    v.tokens.push_back(o.special_tokens[i]);
    v.types.push_back(io::kTokenControl);
  }
  for (int32_t b = 0; b < 256; ++b) {
    v.tokens.push_back(ByteLevelString(symbols[b]));
    v.types.push_back(io::kTokenNormal);
  }
  for (size_t m = 0; m < merges.size(); ++m) {
    const auto [a, b] = merges[m];
    v.tokens.push_back(ByteLevelString(symbols[256 + m]));
    v.types.push_back(io::kTokenNormal);
    v.merges.push_back(ByteLevelString(symbols[a]) + " " + ByteLevelString(symbols[b]));
  }
  nlohmann::ordered_json config = {{"add_bos_token", true},
                                   {"add_eos_token", false},
                                   {"model_max_length", 2048},
                                   {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (n_special > 0) config["bos_token"] = o.special_tokens[0];
  if (n_special > 1) config["eos_token"] = o.special_tokens[1];
  if (n_special > 2) config["pad_token"] = o.special_tokens[2];
  BpeTokenizerFiles out;
  out.tokenizer_json = io::BpeVocabToTokenizerJson(v, kQwen2SplitPattern);
  out.tokenizer_config_json = config.dump(2);
  out.num_merges = static_cast<int32_t>(merges.size());
  return out;
}

}  // namespace specdec::train
