// Decoder-only LM hyperparameters parsed from a Hugging Face `config.json`.
#ifndef SPECDEC_COMMON_MODEL_MODEL_CONFIG_H_
#define SPECDEC_COMMON_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::model {

enum class Architecture { kLlama, kQwen3 };

const char* ArchitectureName(Architecture arch);

// RoPE frequency scaling. Only the schemes whose math is implemented are accepted at parse time.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// A plain value type: the fields every supported architecture needs, validated for consistency.
struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless the config says otherwise
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm on q and k before RoPE
  std::string torch_dtype = "float32";
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  // Number of parameters implied by the shapes (embedding counted once when tied).
  int64_t NumParameters() const;
};

// Parses and validates `config_json` (the text of config.json); `origin` names the file in errors.
// INVALID_ARGUMENT for missing/negative/inconsistent sizes, UNIMPLEMENTED for unsupported
// architectures or RoPE scaling types.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                             const std::string& origin);

// Reads `<dir>/config.json`.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

// Serializes a config to HF-compatible JSON (used by the trainers and tests).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_MODEL_CONFIG_H_
