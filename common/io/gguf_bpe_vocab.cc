#include "common/io/gguf_bpe_vocab.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::io {
namespace {

using Json = nlohmann::json;

// llama.cpp's names of the byte-level BPE pre-tokenizers this converter maps, with the split
// regex that Hugging Face's tokenizer.json of each family carries.
const std::vector<std::pair<std::string, std::string>>& KnownPreTokenizers() {
  static const auto* kKnown = new std::vector<std::pair<std::string, std::string>>{
      {"gpt-2", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
      {"llama-bpe",
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
      {"qwen2",
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
  };
  return *kKnown;
}

absl::StatusOr<Json> ReadJson(const std::string& path, bool required) {
  std::ifstream in(path);
  if (!in) {
    if (!required) return Json();
    return absl::NotFoundError(absl::StrCat(path, ": not found"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return j;
}

// The llama.cpp name of a tokenizer.json pre_tokenizer, or UNIMPLEMENTED.
absl::StatusOr<std::string> PreName(const Json& pre, const std::string& path) {
  std::string regex;
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true)) {
    regex = KnownPreTokenizers()[0].second;  // ByteLevel's own regex is GPT-2's
  } else if (pre.is_object() && pre.value("type", "") == "Sequence" &&
             pre.value("pretokenizers", Json::array()).size() == 2) {
    const Json& split = pre["pretokenizers"][0];
    const Json& byte_level = pre["pretokenizers"][1];
    if (split.value("type", "") == "Split" && split.value("behavior", "") == "Isolated" &&
        split.contains("pattern") && split["pattern"].contains("Regex") &&
        byte_level.value("type", "") == "ByteLevel" && !byte_level.value("use_regex", true)) {
      regex = split["pattern"]["Regex"].get<std::string>();
    }
  }
  if (regex.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": pre_tokenizer ", pre.dump(),
                     " is not a byte-level BPE pre-tokenizer that GGUF "
                     "names (ByteLevel, or Split(regex, Isolated) then ByteLevel without regex)"));
  }
  for (const auto& [name, known] : KnownPreTokenizers()) {
    if (known == regex) return name;
  }
  return absl::UnimplementedError(
      absl::StrCat(path, ": the split regex ", Json(regex).dump(),
                   " has no llama.cpp pre-tokenizer name (known: gpt-2, llama-bpe, qwen2)"));
}

// The id of special token `key` of tokenizer_config.json (a string or {"content": ...}), or -1.
int64_t SpecialId(const Json& config, const std::string& key, const Json& vocab) {
  if (!config.contains(key)) return -1;
  const Json& v = config[key];
  const std::string content = v.is_string() ? v.get<std::string>()
                              : v.is_object() && v.contains("content")
                                  ? v["content"].get<std::string>()
                                  : "";
  auto it = vocab.find(content);
  return it == vocab.end() ? -1 : it->get<int64_t>();
}

absl::Status ReadVocabAndMerges(const Json& model, const Json& added, const std::string& path,
                                GgufBpeVocab& v) {
  const Json& vocab = model["vocab"];
  int64_t n = 0;
  for (const auto& [tok, id] : vocab.items()) {
    if (id.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token '", tok, "' has id ", id.dump()));
    }
    n = std::max<int64_t>(n, id.get<int64_t>() + 1);
  }
  for (const Json& a : added) n = std::max<int64_t>(n, a.value("id", int64_t{0}) + 1);
  if (n <= 0 || n > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": vocabulary of ", n, " ids"));
  }
  v.tokens.assign(n, "");
  v.types.assign(n, kTokenUnused);
  for (const auto& [tok, id] : vocab.items()) {
    v.tokens[id.get<int64_t>()] = tok;
    v.types[id.get<int64_t>()] = kTokenNormal;
  }
  for (const Json& a : added) {
    const int64_t id = a.value("id", int64_t{-1});
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": added token without id"));
    v.tokens[id] = a.value("content", "");
    v.types[id] = a.value("special", false) ? kTokenControl : kTokenUserDefined;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (v.types[i] == kTokenUnused) v.tokens[i] = absl::StrCat("[PAD", i, "]");
  }
  for (const Json& m : model.value("merges", Json::array())) {
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2) {
      v.merges.push_back(absl::StrCat(m[0].get<std::string>(), " ", m[1].get<std::string>()));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": merge ", m.dump()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PreTokenizerRegex(const std::string& pre) {
  for (const auto& [name, regex] : KnownPreTokenizers()) {
    if (name == pre) return regex;
  }
  return absl::UnimplementedError(
      absl::StrCat("pre-tokenizer '", pre, "' is not supported (known: gpt-2, llama-bpe, qwen2)"));
}

absl::StatusOr<GgufBpeVocab> ReadHfBpeTokenizer(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  ASSIGN_OR_RETURN(const Json tok, ReadJson(path, true));
  ASSIGN_OR_RETURN(const Json config, ReadJson(dir + "/tokenizer_config.json", false));
  try {
    const Json& model = tok.at("model");
    if (model.value("type", "") != "BPE" || model.value("byte_fallback", false)) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": only byte-level BPE tokenizers convert to GGUF here (model ",
                       model.value("type", "?"),
                       model.value("byte_fallback", false) ? " with byte_fallback" : "", ")"));
    }
    if (tok.contains("normalizer") && !tok["normalizer"].is_null()) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": normalizer ", tok["normalizer"].dump(), " has no GGUF equivalent"));
    }
    GgufBpeVocab v;
    ASSIGN_OR_RETURN(v.pre, PreName(tok.value("pre_tokenizer", Json()), path));
    RETURN_IF_ERROR(ReadVocabAndMerges(model, tok.value("added_tokens", Json::array()), path, v));
    Json ids = Json::object();
    for (size_t i = 0; i < v.tokens.size(); ++i) ids[v.tokens[i]] = i;
    if (config.is_object()) {
      v.bos = SpecialId(config, "bos_token", ids);
      v.eos = SpecialId(config, "eos_token", ids);
      v.pad = SpecialId(config, "pad_token", ids);
      v.add_bos = config.value("add_bos_token", false);
      if (config.contains("chat_template") && config["chat_template"].is_string()) {
        v.chat_template = config["chat_template"].get<std::string>();
      }
    }
    return v;
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
}

std::string BpeVocabToTokenizerJson(const GgufBpeVocab& v, const std::string& regex) {
  using Ordered = nlohmann::ordered_json;  // the vocabulary in id order, as tokenizers writes it
  Ordered vocab = Ordered::object(), added = Ordered::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    vocab[v.tokens[i]] = i;
    if (v.types[i] == kTokenControl || v.types[i] == kTokenUserDefined) {
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", v.types[i] == kTokenControl}});
    }
  }
  const Ordered byte_level = {{"type", "ByteLevel"},
                              {"add_prefix_space", false},
                              {"trim_offsets", false},
                              {"use_regex", false}};
  const Ordered split = {{"type", "Split"},
                         {"pattern", {{"Regex", regex}}},
                         {"behavior", "Isolated"},
                         {"invert", false}};
  const Ordered tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", v.merges}}}};
  return tok.dump(1) + "\n";
}

}  // namespace specdec::io
