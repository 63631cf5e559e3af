#include "common/tokenizer/spm_convert.h"

#include <algorithm>
#include <exception>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace specdec::tokenizer {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space.
constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeUnknown = 2;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

struct Merge {
  float score;    // Score of the merged piece.
  int32_t id;     // Id of the merged piece.
  int32_t left;   // Id of the left part.
  int32_t right;  // Id of the right part.
};

OrderedJson SpecialTokenRef(const std::string& name, int32_t type_id) {
  return {{"SpecialToken", {{"id", name}, {"type_id", type_id}}}};
}

OrderedJson SequenceRef(const std::string& name, int32_t type_id) {
  return {{"Sequence", {{"id", name}, {"type_id", type_id}}}};
}

}  // namespace

// bos_id, eos_id and unk_id may be -1 for "absent"; any other id outside the vocabulary fails.
absl::StatusOr<std::string> SentencePieceVocabToTokenizerJson(
    const std::vector<SpmVocabEntry>& vocab, int32_t bos_id, int32_t eos_id, int32_t unk_id) {
  if (vocab.empty()) return absl::InvalidArgumentError("SentencePiece vocabulary is empty");
  const auto n = static_cast<int32_t>(vocab.size());
  for (auto [name, id] : {std::pair{"bos", bos_id}, {"eos", eos_id}, {"unk", unk_id}}) {
    if (id < -1 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " id ", id, " is outside the vocabulary [0, ", n, ")"));
    }
  }
  absl::flat_hash_map<std::string_view, int32_t> ids;
  ids.reserve(vocab.size());
  for (int32_t i = 0; i < n; ++i) {
    const std::string& piece = vocab[i].piece;
    if (piece.empty()) return absl::InvalidArgumentError(absl::StrCat("piece ", i, " is empty"));
    if (!IsValidUtf8(piece)) {
      return absl::InvalidArgumentError(absl::StrCat("piece ", i, " is not valid UTF-8"));
    }
    auto [it, inserted] = ids.emplace(piece, i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate piece '", piece, "' at ids ", it->second, " and ", i));
    }
  }

  // Merges: every split of a normal/user-defined piece into two vocabulary pieces.
  std::vector<Merge> merges;
  for (int32_t i = 0; i < n; ++i) {
    const SpmVocabEntry& e = vocab[i];
    if (e.type != kTypeNormal && e.type != kTypeUserDefined) continue;
    const std::string_view piece = e.piece;
    for (size_t cut = Utf8CharLength(piece, 0); cut < piece.size();
         cut += Utf8CharLength(piece, cut)) {
      auto l = ids.find(piece.substr(0, cut));
      if (l == ids.end()) continue;
      auto r = ids.find(piece.substr(cut));
      if (r == ids.end()) continue;
      merges.push_back({e.score, i, l->second, r->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return std::tie(a.id, a.left) < std::tie(b.id, b.left);
  });

  try {
    OrderedJson added = OrderedJson::array();
    for (int32_t i = 0; i < n; ++i) {
      const int32_t type = vocab[i].type;
      const bool special =
          i == bos_id || i == eos_id || i == unk_id || type == kTypeControl || type == kTypeUnknown;
      if (!special && type != kTypeUserDefined) continue;
      added.push_back({{"id", i},
                       {"content", vocab[i].piece},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", !special},
                       {"special", special}});
    }

    OrderedJson model_vocab = OrderedJson::object();
    for (int32_t i = 0; i < n; ++i) model_vocab[vocab[i].piece] = i;
    OrderedJson model_merges = OrderedJson::array();
    for (const Merge& m : merges) {
      model_merges.push_back(OrderedJson::array({vocab[m.left].piece, vocab[m.right].piece}));
    }

    OrderedJson root;
    root["version"] = "1.0";
    root["truncation"] = nullptr;
    root["padding"] = nullptr;
    root["added_tokens"] = std::move(added);
    root["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         OrderedJson::array(
             {{{"type", "Prepend"}, {"prepend", kMetaspace}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}}})}};
    root["pre_tokenizer"] = nullptr;
    if (bos_id >= 0) {
      const std::string& bos = vocab[bos_id].piece;
      root["post_processor"] = {
          {"type", "TemplateProcessing"},
          {"single", OrderedJson::array({SpecialTokenRef(bos, 0), SequenceRef("A", 0)})},
          {"pair", OrderedJson::array({SpecialTokenRef(bos, 0), SequenceRef("A", 0),
                                       SpecialTokenRef(bos, 1), SequenceRef("B", 1)})},
          {"special_tokens",
           {{bos,
             {{"id", bos},
              {"ids", OrderedJson::array({bos_id})},
              {"tokens", OrderedJson::array({bos})}}}}}};
    } else {
      root["post_processor"] = nullptr;
    }
    root["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         OrderedJson::array(
             {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
    root["model"] = {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", unk_id >= 0 ? OrderedJson(vocab[unk_id].piece) : OrderedJson()},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", true},
                     {"byte_fallback", true},
                     {"ignore_merges", false},
                     {"vocab", std::move(model_vocab)},
                     {"merges", std::move(model_merges)}};
    return root.dump(1);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cannot serialize tokenizer.json: ", e.what()));
  }
}

}  // namespace specdec::tokenizer
