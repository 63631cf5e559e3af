// A tiny Qwen3 or Llama shape for tests that build random-weight models (Transformer::
// FromTensors with RandomWeights): 3 layers, hidden 64, grouped-query attention.
#ifndef SPECDEC_TESTS_COMMON_MODEL_SMALL_CONFIG_H_
#define SPECDEC_TESTS_COMMON_MODEL_SMALL_CONFIG_H_

#include <cstdint>

#include "common/model/model_config.h"

namespace specdec::model {

// Qwen3 has q/k norms and untied embeddings; Llama ties them.
inline ModelConfig SmallTestConfig(Architecture arch, int64_t max_positions = 256) {
  ModelConfig c;
  c.architecture = arch;
  c.qk_norm = arch == Architecture::kQwen3;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000;
  c.max_position_embeddings = max_positions;
  c.tie_word_embeddings = arch == Architecture::kLlama;
  return c;
}

}  // namespace specdec::model

#endif  // SPECDEC_TESTS_COMMON_MODEL_SMALL_CONFIG_H_
