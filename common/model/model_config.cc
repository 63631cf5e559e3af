#include "common/model/model_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::model {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(const std::string& origin, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

absl::StatusOr<int64_t> GetInt(const Json& j, const char* key, const std::string& origin,
                               std::optional<int64_t> fallback = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return Invalid(origin, absl::StrCat("missing integer field '", key, "'"));
  }
  if (!it->is_number_integer()) {
    return Invalid(origin, absl::StrCat("field '", key, "' must be an integer, got ", it->dump()));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> GetDouble(const Json& j, const char* key, const std::string& origin,
                                 double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return Invalid(origin, absl::StrCat("field '", key, "' must be a number, got ", it->dump()));
  }
  return it->get<double>();
}

absl::Status CheckPositive(int64_t v, const char* key, const std::string& origin) {
  if (v <= 0) return Invalid(origin, absl::StrCat("field '", key, "' must be > 0, got ", v));
  return absl::OkStatus();
}

// The architecture from `model_type` or `architectures[0]` (Qwen3 with its q/k norms).
absl::Status ParseArchitecture(const Json& j, const std::string& origin, ModelConfig& c) {
  std::string model_type = j.value("model_type", std::string());
  std::string arch_name;
  if (auto it = j.find("architectures");
      it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    arch_name = (*it)[0].get<std::string>();
  }
  if (model_type == "llama" || arch_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (model_type == "qwen3" || arch_name == "Qwen3ForCausalLM") {
    c.architecture = Architecture::kQwen3;
    c.qk_norm = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        origin, ": unsupported model_type '", model_type, "' / architecture '", arch_name,
        "'; supported: llama (LlamaForCausalLM), qwen3 (Qwen3ForCausalLM)"));
  }
  return absl::OkStatus();
}

// The sizes: vocabulary, widths, layers, heads and head_dim, each positive and in range.
absl::Status ParseShape(const Json& j, const std::string& origin, ModelConfig& c) {
  ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", origin));
  ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", origin));
  ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, "intermediate_size", origin));
  ASSIGN_OR_RETURN(c.num_hidden_layers, GetInt(j, "num_hidden_layers", origin));
  ASSIGN_OR_RETURN(c.num_attention_heads, GetInt(j, "num_attention_heads", origin));
  ASSIGN_OR_RETURN(c.num_key_value_heads,
                   GetInt(j, "num_key_value_heads", origin, c.num_attention_heads));
  RETURN_IF_ERROR(CheckPositive(c.vocab_size, "vocab_size", origin));
  RETURN_IF_ERROR(CheckPositive(c.hidden_size, "hidden_size", origin));
  RETURN_IF_ERROR(CheckPositive(c.intermediate_size, "intermediate_size", origin));
  RETURN_IF_ERROR(CheckPositive(c.num_hidden_layers, "num_hidden_layers", origin));
  RETURN_IF_ERROR(CheckPositive(c.num_attention_heads, "num_attention_heads", origin));
  RETURN_IF_ERROR(CheckPositive(c.num_key_value_heads, "num_key_value_heads", origin));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Invalid(origin, absl::StrCat("num_attention_heads (", c.num_attention_heads,
                                        ") must be a multiple of num_key_value_heads (",
                                        c.num_key_value_heads, ")"));
  }
  int64_t default_head_dim = c.hidden_size / c.num_attention_heads;
  ASSIGN_OR_RETURN(c.head_dim, GetInt(j, "head_dim", origin, default_head_dim));
  RETURN_IF_ERROR(CheckPositive(c.head_dim, "head_dim", origin));
  if (c.head_dim % 2 != 0) {
    return Invalid(origin, absl::StrCat("head_dim must be even for RoPE, got ", c.head_dim));
  }
  if (c.architecture == Architecture::kLlama &&
      c.head_dim * c.num_attention_heads != c.hidden_size && !j.contains("head_dim")) {
    return Invalid(origin, "hidden_size must be divisible by num_attention_heads");
  }
  // Sanity bounds: a config with absurd sizes would make us allocate terabytes.
  if (c.vocab_size > (1 << 24) || c.hidden_size > (1 << 16) || c.num_hidden_layers > 1024 ||
      c.intermediate_size > (1 << 20)) {
    return Invalid(origin,
                   "sizes are out of the supported range (vocab <= 16M, hidden <= 65536, "
                   "layers <= 1024, intermediate <= 1M)");
  }
  return absl::OkStatus();
}

// RoPE's scaling from `rope_parameters` (Transformers 5) or `rope_scaling`.
absl::Status ParseRopeScaling(const Json& scaling, const std::string& origin, ModelConfig& c) {
  std::string type = scaling.value("rope_type", scaling.value("type", std::string("default")));
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = scaling.value("factor", 1.0);
  } else if (type == "llama3") {
    c.rope_scaling.type = RopeScaling::Type::kLlama3;
    c.rope_scaling.factor = scaling.value("factor", 8.0);
    c.rope_scaling.low_freq_factor = scaling.value("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = scaling.value("high_freq_factor", 4.0);
    c.rope_scaling.original_max_position_embeddings =
        scaling.value("original_max_position_embeddings", int64_t{8192});
  } else {
    return absl::UnimplementedError(absl::StrCat(origin, ": rope_scaling type '", type,
                                                 "' is not supported (default, linear, llama3)"));
  }
  if (!(c.rope_scaling.factor > 0)) return Invalid(origin, "rope_scaling.factor must be > 0");
  return absl::OkStatus();
}

// The norm's epsilon, RoPE's theta and scaling, and the context length.
absl::Status ParsePositions(const Json& j, const std::string& origin, ModelConfig& c) {
  ASSIGN_OR_RETURN(c.rms_norm_eps, GetDouble(j, "rms_norm_eps", origin, 1e-6));
  // Transformers 5 writes RoPE's settings, theta included, into `rope_parameters`; earlier
  // versions write `rope_theta` at the top level and the scaling into `rope_scaling`.
  const auto params_it = j.find("rope_parameters");
  const bool has_params = params_it != j.end() && params_it->is_object();
  ASSIGN_OR_RETURN(c.rope_theta, GetDouble(j, "rope_theta", origin, 10000.0));
  if (has_params && params_it->contains("rope_theta")) {
    ASSIGN_OR_RETURN(c.rope_theta, GetDouble(*params_it, "rope_theta", origin, c.rope_theta));
  }
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) {
    return Invalid(origin, "rms_norm_eps and rope_theta must be > 0");
  }
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   GetInt(j, "max_position_embeddings", origin, int64_t{2048}));
  RETURN_IF_ERROR(CheckPositive(c.max_position_embeddings, "max_position_embeddings", origin));
  auto it = has_params ? params_it : j.find("rope_scaling");
  if (it != j.end() && it->is_object()) RETURN_IF_ERROR(ParseRopeScaling(*it, origin, c));
  return absl::OkStatus();
}

// Embedding tying, attention bias (refused), the dtype and the special tokens.
absl::Status ParseRest(const Json& j, const std::string& origin, ModelConfig& c) {
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.attention_bias = j.value("attention_bias", false);
  if (c.attention_bias) {
    return absl::UnimplementedError(absl::StrCat(origin, ": attention_bias=true is not supported"));
  }
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    c.torch_dtype = it->get<std::string>();
  } else if (auto v5 = j.find("dtype"); v5 != j.end() && v5->is_string()) {
    c.torch_dtype = v5->get<std::string>();  // Transformers 5's name
  }
  if (auto it = j.find("bos_token_id"); it != j.end() && it->is_number_integer()) {
    c.bos_token_id = it->get<int32_t>();
  }
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int32_t>());
    } else if (it->is_array()) {
      for (const auto& e : *it) {
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseJson(const Json& j, const std::string& origin) {
  if (!j.is_object()) return Invalid(origin, "config must be a JSON object");
  ModelConfig c;
  RETURN_IF_ERROR(ParseArchitecture(j, origin, c));
  RETURN_IF_ERROR(ParseShape(j, origin, c));
  RETURN_IF_ERROR(ParsePositions(j, origin, c));
  RETURN_IF_ERROR(ParseRest(j, origin, c));
  return c;
}

}  // namespace

const char* ArchitectureName(Architecture arch) {
  return arch == Architecture::kQwen3 ? "qwen3" : "llama";
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size;
  const int64_t q = num_attention_heads * head_dim;
  const int64_t kv = num_key_value_heads * head_dim;
  int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * intermediate_size + 2 * h;
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t total = per_layer * num_hidden_layers + vocab_size * h + h;
  if (!tie_word_embeddings) total += vocab_size * h;
  return total;
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                             const std::string& origin) {
  Json j = Json::parse(config_json.begin(), config_json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(origin, "not valid JSON");
  try {
    return ParseJson(j, origin);
  } catch (const Json::exception& e) {
    return Invalid(origin, absl::StrCat("field has the wrong type: ", e.what()));
  }
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open model config"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseModelConfig(ss.str(), path);
}

std::string ModelConfigToJson(const ModelConfig& c) {
  Json j;
  const bool qwen = c.architecture == Architecture::kQwen3;
  j["architectures"] = {qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen ? "qwen3" : "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = false;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = c.torch_dtype;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  return j.dump(2);
}

}  // namespace specdec::model
