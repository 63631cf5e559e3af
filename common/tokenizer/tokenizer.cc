#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <queue>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/regex.h"
#include "common/tokenizer/utf8.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::tokenizer {
namespace {

using Json = nlohmann::json;

// Debian's abseil is built without std::string_view aliasing: convert explicitly.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Transparent hashing so maps keyed by std::string can be probed with std::string_view.
struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
struct StrEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};
template <typename V>
using StrMap = absl::flat_hash_map<std::string, V, StrHash, StrEq>;

// GPT-2's pre-tokenization pattern (HF ByteLevel with use_regex = true).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Ids above this are rejected so a hostile file cannot make us allocate gigabytes.
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
// Words longer than this (in bytes) bypass the BPE cache; the cache is cleared when full.
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMaxCacheEntries = 1 << 16;

// Error helper: every message names the file (origin) and the JSON path at fault.
class ErrorContext {
 public:
  explicit ErrorContext(std::string_view origin) : origin_(origin) {}
  absl::Status Error(std::string_view path, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": ", AV(path), ": ", message));
  }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
};

std::string Quote(std::string_view s) { return absl::StrCat("'", AV(s), "'"); }

absl::StatusOr<std::string> GetString(const Json& obj, std::string_view key,
                                      const std::string& path, const ErrorContext& ctx) {
  auto it = obj.find(key);
  if (it == obj.end()) return ctx.Error(path, absl::StrCat("missing field '", AV(key), "'"));
  if (!it->is_string())
    return ctx.Error(path, absl::StrCat("field '", AV(key), "' must be a string"));
  return it->get<std::string>();
}

absl::StatusOr<bool> GetBool(const Json& obj, std::string_view key, bool default_value,
                             const std::string& path, const ErrorContext& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return default_value;
  if (!it->is_boolean())
    return ctx.Error(path, absl::StrCat("field '", AV(key), "' must be a bool"));
  return it->get<bool>();
}

absl::StatusOr<int64_t> GetInt(const Json& obj, std::string_view key, int64_t default_value,
                               const std::string& path, const ErrorContext& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return default_value;
  if (!it->is_number_integer()) {
    return ctx.Error(path, absl::StrCat("field '", AV(key), "' must be an integer"));
  }
  return it->get<int64_t>();
}

// Reads `{"String": s}` or `{"Regex": r}` into a compiled pattern.
absl::StatusOr<std::shared_ptr<const Regex>> GetPattern(const Json& obj, const std::string& path,
                                                        const ErrorContext& ctx) {
  auto it = obj.find("pattern");
  if (it == obj.end() || !it->is_object()) {
    return ctx.Error(path, "missing object field 'pattern'");
  }
  const std::string ppath = absl::StrCat(path, ".pattern");
  bool literal = false;
  std::string text;
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    literal = true;
    text = s->get<std::string>();
  } else if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    text = r->get<std::string>();
  } else {
    return ctx.Error(ppath, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  if (text.empty()) return ctx.Error(ppath, "empty pattern");
  auto regex = Regex::Compile(text, literal);
  if (!regex.ok()) return ctx.Error(ppath, regex.status().message());
  return std::shared_ptr<const Regex>(std::move(regex).value());
}

std::string TypeOf(const Json& obj) {
  auto it = obj.find("type");
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Replaces every match of `regex` in `text` with `content`.
std::string ReplaceAll(const Regex& regex, std::string_view text, std::string_view content) {
  std::string out;
  size_t last = 0;
  for (const auto& [begin, end] : regex.FindAll(text)) {
    out.append(text.substr(last, begin - last));
    out.append(content);
    last = end;
  }
  out.append(text.substr(last));
  return out;
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Parses "<0xXX>" (upper or lower case hex); -1 when `piece` is not of that form.
int ParseByteToken(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

enum class NormKind { kPrepend, kReplace };
struct NormStep {
  NormKind kind;
  std::string text;                    // Prepend: prefix. Replace: replacement content.
  std::shared_ptr<const Regex> regex;  // Replace only.
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };
enum class PreKind { kByteLevel, kSplit, kMetaspace };
struct PreStep {
  PreKind kind;
  bool add_prefix_space = false;       // ByteLevel.
  std::shared_ptr<const Regex> regex;  // ByteLevel (GPT-2 regex, may be null) and Split.
  SplitBehavior behavior = SplitBehavior::kIsolated;
  std::string replacement;  // Metaspace.
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = false;
};

enum class DecKind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
struct DecStep {
  DecKind kind;
  std::shared_ptr<const Regex> regex;  // Replace.
  std::string text;                    // Replace: content. Strip: char. Metaspace: replacement.
  int64_t start = 0;
  int64_t stop = 0;
  bool strip_first = true;  // Metaspace: drop replacement chars of the first token.
};

// One piece of text during pre-tokenization; `at_origin` marks a piece starting at offset 0 of
// the input (Metaspace's "first" prepend scheme).
struct Piece {
  std::string text;
  bool at_origin;
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
  bool lstrip;
  bool rstrip;
};

struct MergeInfo {
  int32_t rank;
  int32_t new_id;
};

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Cuts `text` at the matches of `regex` according to `behavior`; empty pieces are dropped.
std::vector<Piece> SplitPiece(const Piece& piece, const Regex& regex, SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> matches = regex.FindAll(piece.text);
  if (behavior == SplitBehavior::kContiguous && matches.size() > 1) {
    std::vector<std::pair<size_t, size_t>> merged;
    for (const auto& m : matches) {
      if (!merged.empty() && merged.back().second == m.first) {
        merged.back().second = m.second;
      } else {
        merged.push_back(m);
      }
    }
    matches = std::move(merged);
  }
  // Ranges [begin, end) to keep.
  std::vector<std::pair<size_t, size_t>> ranges;
  const size_t n = piece.text.size();
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    switch (behavior) {
      case SplitBehavior::kIsolated:
      case SplitBehavior::kContiguous:
        ranges.emplace_back(last, begin);
        ranges.emplace_back(begin, end);
        last = end;
        break;
      case SplitBehavior::kRemoved:
        ranges.emplace_back(last, begin);
        last = end;
        break;
      case SplitBehavior::kMergedWithPrevious:
        ranges.emplace_back(last, end);
        last = end;
        break;
      case SplitBehavior::kMergedWithNext:
        ranges.emplace_back(last, begin);
        last = begin;
        break;
    }
  }
  ranges.emplace_back(last, n);
  std::vector<Piece> out;
  for (const auto& [begin, end] : ranges) {
    if (end <= begin) continue;
    out.push_back({piece.text.substr(begin, end - begin), piece.at_origin && begin == 0});
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  // Model.
  StrMap<int32_t> vocab;
  absl::flat_hash_map<uint64_t, MergeInfo> merges;
  std::vector<std::string> id_to_piece;  // Size vocab_size; "" where no piece has the id.
  std::vector<bool> special;             // Size vocab_size.
  std::array<int32_t, 256> byte_ids{};   // Id of "<0xXX>" per byte, -1 when absent.
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  std::optional<int32_t> unk;

  // Added tokens, bucketed by first byte, longest content first.
  std::vector<AddedToken> added;
  std::array<std::vector<int32_t>, 256> added_by_first_byte;
  StrMap<int32_t> added_by_content;

  std::vector<NormStep> normalizer;
  std::vector<PreStep> pre_tokenizer;
  bool has_decoder = false;
  std::vector<DecStep> decoder;

  std::optional<int32_t> bos, eos, pad;
  bool add_bos_by_default = false;

  // A std::mutex like the rest of the project's (TSan sees it; Debian's abseil is not built
  // with TSan, which then cannot see an absl::Mutex).
  mutable std::mutex cache_mu;
  mutable StrMap<std::vector<int32_t>> cache;  // guarded by cache_mu

  std::optional<int32_t> Lookup(std::string_view piece) const {
    if (auto it = added_by_content.find(piece); it != added_by_content.end()) return it->second;
    if (auto it = vocab.find(piece); it != vocab.end()) return it->second;
    return std::nullopt;
  }

  void EncodeSegment(std::string_view segment, bool at_origin, std::vector<int32_t>& out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  void BpeWord(std::string_view word, std::vector<int32_t>& out) const;
};

namespace {

// ---- Parsing ----------------------------------------------------------------------------------

absl::Status ParseNormalizer(const Json& j, const std::string& path, const ErrorContext& ctx,
                             std::vector<NormStep>& steps) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return ctx.Error(path, "must be an object or null");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return ctx.Error(path, "missing array 'normalizers'");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(
          ParseNormalizer((*it)[i], absl::StrCat(path, ".normalizers[", i, "]"), ctx, steps));
    }
    return absl::OkStatus();
  }
  if (type == "NFC") return absl::OkStatus();  // Identity: input is assumed to be NFC already.
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prepend, GetString(j, "prepend", path, ctx));
    steps.push_back({NormKind::kPrepend, std::move(prepend), nullptr});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(std::shared_ptr<const Regex> regex, GetPattern(j, path, ctx));
    ASSIGN_OR_RETURN(std::string content, GetString(j, "content", path, ctx));
    steps.push_back({NormKind::kReplace, std::move(content), std::move(regex)});
    return absl::OkStatus();
  }
  return ctx.Error(path, absl::StrCat("unsupported normalizer type ", Quote(type)));
}

absl::StatusOr<PrependScheme> ParsePrependScheme(const Json& j, const std::string& path,
                                                 const ErrorContext& ctx) {
  if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return ctx.Error(path, "field 'prepend_scheme' must be a string");
    const std::string s = it->get<std::string>();
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    return ctx.Error(path, absl::StrCat("unsupported prepend_scheme ", Quote(s)));
  }
  ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", true, path, ctx));
  return add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
}

absl::StatusOr<std::string> ParseReplacement(const Json& j, const std::string& path,
                                             const ErrorContext& ctx) {
  std::string replacement = "\xE2\x96\x81";  // U+2581.
  if (j.contains("replacement")) {
    ASSIGN_OR_RETURN(replacement, GetString(j, "replacement", path, ctx));
  }
  if (replacement.empty() || Utf8CharLength(replacement, 0) != replacement.size()) {
    return ctx.Error(path, "'replacement' must be exactly one character");
  }
  return replacement;
}

absl::Status ParsePreTokenizer(const Json& j, const std::string& path, const ErrorContext& ctx,
                               std::vector<PreStep>& steps) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return ctx.Error(path, "must be an object or null");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return ctx.Error(path, "missing array 'pretokenizers'");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(
          ParsePreTokenizer((*it)[i], absl::StrCat(path, ".pretokenizers[", i, "]"), ctx, steps));
    }
    return absl::OkStatus();
  }
  PreStep step;
  if (type == "ByteLevel") {
    step.kind = PreKind::kByteLevel;
    ASSIGN_OR_RETURN(step.add_prefix_space, GetBool(j, "add_prefix_space", true, path, ctx));
    ASSIGN_OR_RETURN(bool use_regex, GetBool(j, "use_regex", true, path, ctx));
    if (use_regex) {
      auto regex = Regex::Compile(kGpt2Pattern, /*literal=*/false);
      if (!regex.ok()) return ctx.Error(path, regex.status().message());
      step.regex = std::move(regex).value();
    }
  } else if (type == "Split") {
    step.kind = PreKind::kSplit;
    ASSIGN_OR_RETURN(step.regex, GetPattern(j, path, ctx));
    ASSIGN_OR_RETURN(bool invert, GetBool(j, "invert", false, path, ctx));
    if (invert) return ctx.Error(path, "Split with invert = true is not supported");
    ASSIGN_OR_RETURN(std::string behavior, GetString(j, "behavior", path, ctx));
    if (behavior == "Isolated") {
      step.behavior = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = SplitBehavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = SplitBehavior::kContiguous;
    } else {
      return ctx.Error(path, absl::StrCat("unsupported Split behavior ", Quote(behavior)));
    }
  } else if (type == "Metaspace") {
    step.kind = PreKind::kMetaspace;
    ASSIGN_OR_RETURN(step.replacement, ParseReplacement(j, path, ctx));
    ASSIGN_OR_RETURN(step.prepend, ParsePrependScheme(j, path, ctx));
    ASSIGN_OR_RETURN(step.split, GetBool(j, "split", true, path, ctx));
    if (step.split) {
      auto regex = Regex::Compile(step.replacement, /*literal=*/true);
      if (!regex.ok()) return ctx.Error(path, regex.status().message());
      step.regex = std::move(regex).value();
    }
  } else {
    return ctx.Error(path, absl::StrCat("unsupported pre_tokenizer type ", Quote(type)));
  }
  steps.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ParseDecoder(const Json& j, const std::string& path, const ErrorContext& ctx,
                          std::vector<DecStep>& steps) {
  if (!j.is_object()) return ctx.Error(path, "must be an object or null");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return ctx.Error(path, "missing array 'decoders'");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(ParseDecoder((*it)[i], absl::StrCat(path, ".decoders[", i, "]"), ctx, steps));
    }
    return absl::OkStatus();
  }
  DecStep step;
  if (type == "ByteLevel") {
    step.kind = DecKind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecKind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecKind::kFuse;
  } else if (type == "Replace") {
    step.kind = DecKind::kReplace;
    ASSIGN_OR_RETURN(step.regex, GetPattern(j, path, ctx));
    ASSIGN_OR_RETURN(step.text, GetString(j, "content", path, ctx));
  } else if (type == "Strip") {
    step.kind = DecKind::kStrip;
    ASSIGN_OR_RETURN(step.text, GetString(j, "content", path, ctx));
    if (step.text.empty() || Utf8CharLength(step.text, 0) != step.text.size()) {
      return ctx.Error(path, "'content' must be exactly one character");
    }
    ASSIGN_OR_RETURN(step.start, GetInt(j, "start", 0, path, ctx));
    ASSIGN_OR_RETURN(step.stop, GetInt(j, "stop", 0, path, ctx));
    if (step.start < 0 || step.stop < 0) return ctx.Error(path, "negative start/stop");
  } else if (type == "Metaspace") {
    step.kind = DecKind::kMetaspace;
    ASSIGN_OR_RETURN(step.text, ParseReplacement(j, path, ctx));
    ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, path, ctx));
    step.strip_first = scheme != PrependScheme::kNever;
  } else {
    return ctx.Error(path, absl::StrCat("unsupported decoder type ", Quote(type)));
  }
  steps.push_back(std::move(step));
  return absl::OkStatus();
}

// Returns the content of a special-token entry of tokenizer_config.json: a string, an object with
// "content", or null (nullopt).
absl::StatusOr<std::optional<std::string>> ConfigTokenContent(const Json& j, std::string_view key,
                                                              const ErrorContext& ctx) {
  const Json& v = j.at(key);
  if (v.is_null()) return std::optional<std::string>();
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (v.is_object()) {
    ASSIGN_OR_RETURN(std::string content, GetString(v, "content", std::string(key), ctx));
    return std::optional<std::string>(std::move(content));
  }
  return ctx.Error(key, "must be a string, an object with 'content', or null");
}

// Finds the token a TemplateProcessing post-processor puts first in a single sequence, if any.
std::optional<std::string> TemplateFirstSpecialToken(const Json& pp) {
  if (!pp.is_object()) return std::nullopt;
  const std::string type = TypeOf(pp);
  if (type == "Sequence") {
    auto it = pp.find("processors");
    if (it == pp.end() || !it->is_array()) return std::nullopt;
    for (const Json& sub : *it) {
      if (auto t = TemplateFirstSpecialToken(sub)) return t;
    }
    return std::nullopt;
  }
  if (type != "TemplateProcessing") return std::nullopt;
  auto single = pp.find("single");
  if (single == pp.end() || !single->is_array() || single->empty()) return std::nullopt;
  const Json& first = (*single)[0];
  if (!first.is_object()) return std::nullopt;
  auto st = first.find("SpecialToken");
  if (st == first.end() || !st->is_object()) return std::nullopt;
  auto id = st->find("id");
  if (id == st->end() || !id->is_string()) return std::nullopt;
  std::string name = id->get<std::string>();
  // special_tokens maps the template name to the actual token(s).
  if (auto specials = pp.find("special_tokens"); specials != pp.end() && specials->is_object()) {
    if (auto entry = specials->find(name); entry != specials->end() && entry->is_object()) {
      if (auto tokens = entry->find("tokens"); tokens != entry->end() && tokens->is_array() &&
                                               tokens->size() == 1 && (*tokens)[0].is_string()) {
        return (*tokens)[0].get<std::string>();
      }
    }
  }
  return name;
}

absl::Status ParseModel(const Json& root, const ErrorContext& ctx, Tokenizer::Impl& impl,
                        int64_t& max_id) {
  auto mit = root.find("model");
  if (mit == root.end() || mit->is_null()) return ctx.Error("model", "missing 'model'");
  const Json& model = *mit;
  if (!model.is_object()) return ctx.Error("model", "must be an object");
  const std::string type = TypeOf(model);
  // Old files omit the type of a BPE model; they are recognized by their merges.
  if (!(type == "BPE" || (type.empty() && model.contains("merges")))) {
    return ctx.Error("model.type", absl::StrCat("unsupported model type ", Quote(type),
                                                " (only BPE is supported)"));
  }
  ASSIGN_OR_RETURN(impl.byte_fallback, GetBool(model, "byte_fallback", false, "model", ctx));
  ASSIGN_OR_RETURN(impl.ignore_merges, GetBool(model, "ignore_merges", false, "model", ctx));
  ASSIGN_OR_RETURN(impl.fuse_unk, GetBool(model, "fuse_unk", false, "model", ctx));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(key); it != model.end() && !it->is_null() &&
                                   !(it->is_string() && it->get<std::string>().empty())) {
      return ctx.Error(absl::StrCat("model.", key), "is not supported");
    }
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) {
      return ctx.Error("model.dropout", "BPE dropout is not supported");
    }
  }

  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object()) {
    return ctx.Error("model.vocab", "missing object 'vocab'");
  }
  if (vit->empty()) return ctx.Error("model.vocab", "empty vocabulary");
  absl::flat_hash_map<int32_t, std::string> seen;
  impl.vocab.reserve(vit->size());
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    const std::string path = absl::StrCat("model.vocab[", Quote(it.key()), "]");
    if (!it->is_number_integer()) return ctx.Error(path, "id must be an integer");
    const int64_t id = it->get<int64_t>();
    if (id < 0) return ctx.Error(path, absl::StrCat("negative id ", id));
    if (id > kMaxId) return ctx.Error(path, absl::StrCat("id ", id, " too large"));
    auto [sit, inserted] = seen.emplace(static_cast<int32_t>(id), it.key());
    if (!inserted) {
      return ctx.Error(
          path, absl::StrCat("duplicate id ", id, " (also used by ", Quote(sit->second), ")"));
    }
    impl.vocab.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }

  auto mg = model.find("merges");
  if (mg != model.end() && !mg->is_null()) {
    if (!mg->is_array()) return ctx.Error("model.merges", "must be an array");
    impl.merges.reserve(mg->size());
    for (size_t rank = 0; rank < mg->size(); ++rank) {
      const Json& m = (*mg)[rank];
      const std::string path = absl::StrCat("model.merges[", rank, "]");
      std::string a, b;
      if (m.is_string()) {
        std::vector<std::string> parts = absl::StrSplit(m.get<std::string>(), ' ');
        if (parts.size() != 2) return ctx.Error(path, "expected \"left right\"");
        a = std::move(parts[0]);
        b = std::move(parts[1]);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        return ctx.Error(path, "expected a \"left right\" string or a [left, right] pair");
      }
      auto ia = impl.vocab.find(a);
      if (ia == impl.vocab.end()) {
        return ctx.Error(path, absl::StrCat("merge piece ", Quote(a), " is not in the vocab"));
      }
      auto ib = impl.vocab.find(b);
      if (ib == impl.vocab.end()) {
        return ctx.Error(path, absl::StrCat("merge piece ", Quote(b), " is not in the vocab"));
      }
      auto ic = impl.vocab.find(absl::StrCat(a, b));
      if (ic == impl.vocab.end()) {
        return ctx.Error(
            path, absl::StrCat("merged piece ", Quote(absl::StrCat(a, b)), " is not in the vocab"));
      }
      // As in HF, a later duplicate of a pair overrides the earlier one.
      impl.merges.insert_or_assign(PairKey(ia->second, ib->second),
                                   MergeInfo{static_cast<int32_t>(rank), ic->second});
    }
  }

  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) return ctx.Error("model.unk_token", "must be a string or null");
    auto u = impl.vocab.find(it->get<std::string>());
    if (u == impl.vocab.end()) {
      return ctx.Error("model.unk_token",
                       absl::StrCat(Quote(it->get<std::string>()), " is not in the vocab"));
    }
    impl.unk = u->second;
  }
  impl.byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = impl.vocab.find(absl::StrFormat("<0x%02X>", b));
    if (it != impl.vocab.end()) impl.byte_ids[b] = it->second;
  }
  return absl::OkStatus();
}

absl::Status ParseAddedTokens(const Json& root, const ErrorContext& ctx, Tokenizer::Impl& impl,
                              int64_t& max_id) {
  auto at = root.find("added_tokens");
  if (at == root.end() || at->is_null()) return absl::OkStatus();
  if (!at->is_array()) return ctx.Error("added_tokens", "must be an array");
  absl::flat_hash_map<int32_t, std::string> vocab_by_id;
  for (const auto& [piece, id] : impl.vocab) vocab_by_id.emplace(id, piece);
  absl::flat_hash_map<int32_t, size_t> added_ids;
  for (size_t i = 0; i < at->size(); ++i) {
    const Json& t = (*at)[i];
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object()) return ctx.Error(path, "must be an object");
    auto idit = t.find("id");
    if (idit == t.end() || !idit->is_number_integer()) {
      return ctx.Error(path, "missing integer 'id'");
    }
    const int64_t id = idit->get<int64_t>();
    if (id < 0) return ctx.Error(path, absl::StrCat("negative id ", id));
    if (id > kMaxId) return ctx.Error(path, absl::StrCat("id ", id, " too large"));
    AddedToken token;
    token.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(token.content, GetString(t, "content", path, ctx));
    if (token.content.empty()) return ctx.Error(path, "empty 'content'");
    ASSIGN_OR_RETURN(token.special, GetBool(t, "special", false, path, ctx));
    ASSIGN_OR_RETURN(token.lstrip, GetBool(t, "lstrip", false, path, ctx));
    ASSIGN_OR_RETURN(token.rstrip, GetBool(t, "rstrip", false, path, ctx));
    if (auto v = vocab_by_id.find(token.id); v != vocab_by_id.end() && v->second != token.content) {
      return ctx.Error(path, absl::StrCat("duplicate id ", id, ": ", Quote(token.content),
                                          " but the vocab has ", Quote(v->second)));
    }
    if (!added_ids.emplace(token.id, i).second) {
      return ctx.Error(path, absl::StrCat("duplicate id ", id, " (also added_tokens[",
                                          added_ids[token.id], "])"));
    }
    if (!impl.added_by_content.emplace(token.content, token.id).second) {
      return ctx.Error(path, absl::StrCat("duplicate content ", Quote(token.content)));
    }
    max_id = std::max(max_id, id);
    impl.added.push_back(std::move(token));
  }
  for (size_t i = 0; i < impl.added.size(); ++i) {
    impl.added_by_first_byte[static_cast<uint8_t>(impl.added[i].content[0])].push_back(
        static_cast<int32_t>(i));
  }
  for (auto& bucket : impl.added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return impl.added[a].content.size() > impl.added[b].content.size();
    });
  }
  return absl::OkStatus();
}

absl::Status ResolveSpecialTokens(const Json& root, std::string_view config_text,
                                  const ErrorContext& ctx, Tokenizer::Impl& impl) {
  std::optional<std::string> template_bos;
  if (auto pp = root.find("post_processor"); pp != root.end()) {
    template_bos = TemplateFirstSpecialToken(*pp);
  }
  impl.add_bos_by_default = template_bos.has_value();
  if (template_bos.has_value()) impl.bos = impl.Lookup(*template_bos);

  auto first_present = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view n : names) {
      if (auto id = impl.Lookup(n)) return id;
    }
    return std::optional<int32_t>();
  };
  if (!impl.bos) impl.bos = first_present({"<s>", "<|begin_of_text|>", "<bos>"});
  impl.eos = first_present({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
  impl.pad = first_present({"<pad>", "<|pad|>", "[PAD]"});

  if (config_text.empty()) return absl::OkStatus();
  ErrorContext cctx(ctx.origin());
  Json config;
  try {
    config = Json::parse(config_text);
  } catch (const std::exception& e) {
    return cctx.Error("tokenizer_config", absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!config.is_object()) return cctx.Error("tokenizer_config", "must be a JSON object");
  struct Slot {
    const char* key;
    std::optional<int32_t>* id;
  };
  std::optional<int32_t> unk_from_config;
  for (const Slot& slot : {Slot{"bos_token", &impl.bos}, Slot{"eos_token", &impl.eos},
                           Slot{"pad_token", &impl.pad}, Slot{"unk_token", &unk_from_config}}) {
    if (!config.contains(slot.key)) continue;
    ASSIGN_OR_RETURN(std::optional<std::string> content,
                     ConfigTokenContent(config, slot.key, cctx));
    if (!content.has_value()) {
      *slot.id = std::nullopt;
      continue;
    }
    std::optional<int32_t> id = impl.Lookup(*content);
    if (!id.has_value()) {
      return cctx.Error(absl::StrCat("tokenizer_config.", slot.key),
                        absl::StrCat(Quote(*content), " is not a token of the vocabulary"));
    }
    *slot.id = id;
  }
  if (!impl.unk) impl.unk = unk_from_config;
  if (config.contains("add_bos_token")) {
    ASSIGN_OR_RETURN(impl.add_bos_by_default,
                     GetBool(config, "add_bos_token", false, "tokenizer_config", cctx));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return ss.str();
}

}  // namespace

// ---- Encoding ---------------------------------------------------------------------------------

void Tokenizer::Impl::EncodeSegment(std::string_view segment, bool at_origin,
                                    std::vector<int32_t>& out) const {
  std::string text(segment);
  for (const NormStep& step : normalizer) {
    if (text.empty()) break;
    if (step.kind == NormKind::kPrepend) {
      text.insert(0, step.text);
    } else {
      text = ReplaceAll(*step.regex, text, step.text);
    }
  }
  if (text.empty()) return;
  std::vector<Piece> pieces;
  pieces.push_back({std::move(text), at_origin});
  for (const PreStep& step : pre_tokenizer) {
    std::vector<Piece> next;
    next.reserve(pieces.size());
    for (Piece& p : pieces) {
      switch (step.kind) {
        case PreKind::kByteLevel: {
          if (step.add_prefix_space && p.text[0] != ' ') p.text.insert(0, " ");
          std::vector<Piece> parts;
          if (step.regex) {
            parts = SplitPiece(p, *step.regex, SplitBehavior::kIsolated);
          } else {
            parts.push_back(std::move(p));
          }
          for (Piece& part : parts) {
            std::string mapped;
            AppendByteLevel(part.text, mapped);
            next.push_back({std::move(mapped), part.at_origin});
          }
          break;
        }
        case PreKind::kSplit:
          for (Piece& part : SplitPiece(p, *step.regex, step.behavior)) {
            next.push_back(std::move(part));
          }
          break;
        case PreKind::kMetaspace: {
          std::string replaced;
          replaced.reserve(p.text.size() + step.replacement.size());
          for (char c : p.text) {
            if (c == ' ') {
              replaced += step.replacement;
            } else {
              replaced.push_back(c);
            }
          }
          const bool starts_with_replacement = replaced.rfind(step.replacement, 0) == 0;
          if (!starts_with_replacement &&
              (step.prepend == PrependScheme::kAlways ||
               (step.prepend == PrependScheme::kFirst && p.at_origin))) {
            replaced.insert(0, step.replacement);
          }
          Piece whole{std::move(replaced), p.at_origin};
          if (step.split) {
            for (Piece& part : SplitPiece(whole, *step.regex, SplitBehavior::kMergedWithNext)) {
              next.push_back(std::move(part));
            }
          } else {
            next.push_back(std::move(whole));
          }
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  for (const Piece& p : pieces) EncodeWord(p.text, out);
}

void Tokenizer::Impl::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  BpeWord(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(word, std::move(ids));
  }
}

void Tokenizer::Impl::BpeWord(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool last_was_unk = false;
  auto push = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, true});
    if (index > 0) symbols[index - 1].next = index;
  };
  for (size_t pos = 0; pos < word.size();) {
    const size_t n = Utf8CharLength(word, pos);
    const std::string_view ch = word.substr(pos, n);
    pos += n;
    if (auto it = vocab.find(ch); it != vocab.end()) {
      push(it->second);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) push(byte_ids[static_cast<uint8_t>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (unk.has_value()) {
      if (!(fuse_unk && last_was_unk)) push(*unk);
      last_was_unk = true;
    }
  }

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left;
    int32_t right;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t left_pos) {
    if (left_pos < 0) return;
    const int32_t right_pos = symbols[left_pos].next;
    if (right_pos < 0) return;
    const int32_t a = symbols[left_pos].id;
    const int32_t b = symbols[right_pos].id;
    auto it = merges.find(PairKey(a, b));
    if (it == merges.end()) return;
    queue.push({it->second.rank, left_pos, a, b, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (!left.alive || left.id != c.left || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right) continue;
    left.id = c.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

// ---- Tokenizer --------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(
    const std::string& tokenizer_json_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_json_path));
  std::string config_text;
  std::error_code ec;
  const std::filesystem::path config_path =
      std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(config_text, ReadFile(config_path.string()));
  }
  return FromJson(text, tokenizer_json_path, config_text);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view origin_for_errors,
    std::string_view tokenizer_config_json) {
  const ErrorContext ctx(origin_for_errors);
  try {
    Json root;
    try {
      root = Json::parse(tokenizer_json);
    } catch (const Json::parse_error& e) {
      return ctx.Error("(root)", absl::StrCat("invalid JSON: ", e.what()));
    }
    if (!root.is_object()) return ctx.Error("(root)", "must be a JSON object");
    auto impl = std::make_unique<Impl>();
    int64_t max_id = -1;
    RETURN_IF_ERROR(ParseModel(root, ctx, *impl, max_id));
    RETURN_IF_ERROR(ParseAddedTokens(root, ctx, *impl, max_id));
    if (auto it = root.find("normalizer"); it != root.end()) {
      RETURN_IF_ERROR(ParseNormalizer(*it, "normalizer", ctx, impl->normalizer));
    }
    if (auto it = root.find("pre_tokenizer"); it != root.end()) {
      RETURN_IF_ERROR(ParsePreTokenizer(*it, "pre_tokenizer", ctx, impl->pre_tokenizer));
    }
    if (auto it = root.find("decoder"); it != root.end() && !it->is_null()) {
      impl->has_decoder = true;
      RETURN_IF_ERROR(ParseDecoder(*it, "decoder", ctx, impl->decoder));
    }

    const auto size = static_cast<size_t>(max_id + 1);
    impl->id_to_piece.assign(size, std::string());
    impl->special.assign(size, false);
    for (const auto& [piece, id] : impl->vocab) impl->id_to_piece[id] = piece;
    for (const AddedToken& t : impl->added) {
      impl->id_to_piece[t.id] = t.content;
      impl->special[t.id] = t.special;
    }
    RETURN_IF_ERROR(ResolveSpecialTokens(root, tokenizer_config_json, ctx, *impl));
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
  } catch (const std::exception& e) {
    return ctx.Error("(root)", absl::StrCat("unexpected JSON structure: ", e.what()));
  }
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos) {
    if (!impl_->bos.has_value()) {
      return absl::FailedPreconditionError("Encode(add_bos=true): the tokenizer has no BOS token");
    }
    out.push_back(*impl_->bos);
  }
  // Split out added tokens (leftmost, then longest match) and encode the text between them.
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = impl_->added_by_first_byte[static_cast<uint8_t>(text[pos])];
    const AddedToken* match = nullptr;
    for (int32_t index : bucket) {
      const AddedToken& t = impl_->added[index];
      if (text.substr(pos, t.content.size()) == t.content) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + match->content.size();
    if (match->lstrip) {
      while (begin > segment_start && IsAsciiSpace(text[begin - 1])) --begin;
    }
    if (match->rstrip) {
      while (end < text.size() && IsAsciiSpace(text[end])) ++end;
    }
    if (begin > segment_start) {
      impl_->EncodeSegment(text.substr(segment_start, begin - segment_start), segment_start == 0,
                           out);
    }
    out.push_back(match->id);
    segment_start = pos = end;
  }
  if (segment_start < text.size()) {
    impl_->EncodeSegment(text.substr(segment_start), segment_start == 0, out);
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl.id_to_piece.size()) continue;
    if (impl.id_to_piece[id].empty()) continue;
    if (skip_special_tokens && impl.special[id]) continue;
    tokens.push_back(impl.id_to_piece[id]);
  }
  if (!impl.has_decoder) return absl::StrJoin(tokens, " ");
  for (const DecStep& step : impl.decoder) {
    switch (step.kind) {
      case DecKind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) {
          if (!AppendFromByteLevel(t, bytes)) bytes += t;
        }
        tokens.assign(1, std::move(bytes));
        break;
      }
      case DecKind::kReplace:
        for (std::string& t : tokens) t = ReplaceAll(*step.regex, t, step.text);
        break;
      case DecKind::kByteFallback: {
        std::vector<std::string> next;
        std::string pending;
        bool have_pending = false;
        for (std::string& t : tokens) {
          const int byte = ParseByteToken(t);
          if (byte >= 0) {
            pending.push_back(static_cast<char>(byte));
            have_pending = true;
            continue;
          }
          if (have_pending) next.push_back(std::move(pending));
          pending.clear();
          have_pending = false;
          next.push_back(std::move(t));
        }
        if (have_pending) next.push_back(std::move(pending));
        tokens = std::move(next);
        break;
      }
      case DecKind::kFuse:
        tokens.assign(1, absl::StrJoin(tokens, ""));
        break;
      case DecKind::kStrip: {
        const std::string& c = step.text;
        for (std::string& t : tokens) {
          size_t begin = 0;
          for (int64_t i = 0; i < step.start && t.compare(begin, c.size(), c) == 0; ++i) {
            begin += c.size();
          }
          size_t end = t.size();
          for (int64_t i = 0; i < step.stop && end >= begin + c.size() &&
                              t.compare(end - c.size(), c.size(), c) == 0;
               ++i) {
            end -= c.size();
          }
          t = t.substr(begin, end - begin);
        }
        break;
      }
      case DecKind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (size_t pos = 0; pos < t.size();) {
            if (t.compare(pos, step.text.size(), step.text) == 0) {
              if (!(i == 0 && step.strip_first)) out.push_back(' ');
              pos += step.text.size();
            } else {
              out.push_back(t[pos++]);
            }
          }
          tokens[i] = std::move(out);
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

absl::Status Tokenizer::ValidateIds(std::span<const int32_t> ids) const {
  const int32_t size = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", size, ")"));
    }
  }
  return absl::OkStatus();
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_piece.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }
std::optional<int32_t> Tokenizer::unk_id() const { return impl_->unk; }
bool Tokenizer::add_bos_by_default() const { return impl_->add_bos_by_default; }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view piece) const {
  return impl_->Lookup(piece);
}

std::string_view Tokenizer::IdToPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->id_to_piece[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

}  // namespace specdec::tokenizer
