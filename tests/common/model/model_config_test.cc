#include "common/model/model_config.h"

#include <gtest/gtest.h>

#include "common/util/status_matchers.h"

namespace specdec::model {
namespace {

constexpr char kQwen3[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
  "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000, "max_position_embeddings": 40960,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 151643,
  "eos_token_id": 151645, "attention_bias": false})";

TEST(ModelConfig, ParsesQwen3) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(kQwen3, "config.json"));
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151645});
  // Qwen3-4B has about 4.0B parameters.
  EXPECT_NEAR(c.NumParameters() / 1e9, 4.02, 0.05);
}

// Transformers 5 writes theta and the scaling into `rope_parameters` and the dtype as `dtype`.
TEST(ModelConfig, ReadsTransformers5RopeParametersAndDtype) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(R"({
    "model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "dtype": "bfloat16", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
    "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64}})",
                                                               "config.json"));
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  SPECDEC_ASSERT_OK_AND_ASSIGN(ModelConfig d, ParseModelConfig(R"({
    "model_type": "qwen3", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})",
                                                               "config.json"));
  EXPECT_DOUBLE_EQ(d.rope_theta, 1e6);
  EXPECT_EQ(d.rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfig, RoundTripsThroughJson) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(kQwen3, "a"));
  SPECDEC_ASSERT_OK_AND_ASSIGN(ModelConfig d, ParseModelConfig(ModelConfigToJson(c), "b"));
  EXPECT_EQ(d.hidden_size, c.hidden_size);
  EXPECT_EQ(d.head_dim, c.head_dim);
  EXPECT_EQ(d.tie_word_embeddings, c.tie_word_embeddings);
  EXPECT_EQ(d.architecture, c.architecture);
}

TEST(ModelConfig, RejectsBadConfigsWithClearMessages) {
  SPECDEC_EXPECT_STATUS(ParseModelConfig("{not json", "x/config.json"),
                        absl::StatusCode::kInvalidArgument, "x/config.json: not valid JSON");
  SPECDEC_EXPECT_STATUS(ParseModelConfig(R"({"model_type":"gpt2"})", "c"),
                        absl::StatusCode::kUnimplemented, "unsupported model_type 'gpt2'");
  SPECDEC_EXPECT_STATUS(ParseModelConfig(R"({"model_type":"llama","vocab_size":10})", "c"),
                        absl::StatusCode::kInvalidArgument, "missing integer field 'hidden_size'");
  SPECDEC_EXPECT_STATUS(ParseModelConfig(R"({"model_type":"llama","vocab_size":-3,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2})",
                                         "c"),
                        absl::StatusCode::kInvalidArgument, "'vocab_size' must be > 0");
  SPECDEC_EXPECT_STATUS(ParseModelConfig(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
        "num_key_value_heads":3})",
                                         "c"),
                        absl::StatusCode::kInvalidArgument, "multiple of num_key_value_heads");
  SPECDEC_EXPECT_STATUS(ParseModelConfig(R"({"model_type":"llama","vocab_size":"10"})", "c"),
                        absl::StatusCode::kInvalidArgument, "must be an integer");
  SPECDEC_EXPECT_STATUS(ParseModelConfig(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
        "rope_scaling":{"type":"yarn","factor":4}})",
                                         "c"),
                        absl::StatusCode::kUnimplemented, "rope_scaling type 'yarn'");
  SPECDEC_EXPECT_STATUS(
      ParseModelConfig(R"({"model_type":"llama","vocab_size":100000000,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2})",
                       "c"),
      absl::StatusCode::kInvalidArgument, "out of the supported range");
}

}  // namespace
}  // namespace specdec::model
