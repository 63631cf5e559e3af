// Batch invariance of the decoder on the project's kernels, with bf16 and with f32 weights
// (docs/design.md section 2.6): a sequence's logits are bit-identical alone and inside a pass of
// 2 to 32 mixed sequences (prefills joining the pass, one-token steps, chain verifies, tree
// verifies), and a tree row's logits are those of the AR step at its position once its ancestors
// are committed.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "common/model/ops.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"

namespace specdec::model {
namespace {

std::unique_ptr<Transformer> TestModel(int64_t head_dim, at::ScalarType dtype,
                                       std::optional<at::ScalarType> activations) {
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 101;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = head_dim;
  c.hidden_size = 4 * head_dim;
  c.intermediate_size = 8 * head_dim;
  c.num_hidden_layers = 4;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = true;
  LoadOptions o;
  o.dtype = dtype;
  o.activation_dtype = activations;
  auto m = Transformer::FromTensors(c, Transformer::RandomWeights(c, 3, 0.2), o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<int32_t> Tokens(int n, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (seed * 37 + i * 11 + i * i * 5) % 101;
  return t;
}

// What sequence s adds in the pass: kind s % 4 = a prefill of a fresh cache (a prompt joining
// the pass), a one-token step, a chain of 5, a tree of 7 nodes; the others extend a context of
// 6 + s tokens.
struct Work {
  std::vector<int32_t> context, tokens, parents, positions;
};

Work MakeWork(int s) {
  Work w;
  const int kind = s % 4;
  if (kind != 0) w.context = Tokens(6 + s, s);
  const int past = static_cast<int>(w.context.size());
  if (kind == 0) w.tokens = Tokens(9 + s % 5, 100 + s);
  if (kind == 1) w.tokens = Tokens(1, 200 + s);
  if (kind == 2) w.tokens = Tokens(5, 300 + s);
  if (kind == 3) {
    w.tokens = Tokens(7, 400 + s);
    w.parents = {-1, -1, 0, 0, 1, 3, 5};
    for (size_t i = 0; i < w.parents.size(); ++i) {
      w.positions.push_back(w.parents[i] < 0 ? past : w.positions[w.parents[i]] + 1);
    }
  }
  return w;
}

SequenceInput Input(KvCache* cache, const Work& w) {
  SequenceInput in;
  in.cache = cache;
  in.tokens = w.tokens;
  in.tree_parents = w.parents;
  in.positions = w.positions;
  in.logits = LogitsMode::kAll;
  return in;
}

// Each sequence's logits, every sequence of `works` in one pass (their contexts prefilled alone).
std::vector<at::Tensor> Pass(const Transformer& m, const std::vector<Work>& works) {
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<SequenceInput> inputs;
  for (const Work& w : works) {
    caches.push_back(m.NewCache());
    if (!w.context.empty()) {
      SequenceInput pre;
      pre.cache = caches.back().get();
      pre.tokens = w.context;
      EXPECT_TRUE(m.Forward(std::span<const SequenceInput>(&pre, 1)).ok());
    }
    inputs.push_back(Input(caches.back().get(), w));
  }
  auto out = m.Forward(inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<at::Tensor> logits;
  if (out.ok()) {
    for (const auto& o : *out) logits.push_back(o.logits);
  }
  return logits;
}

// bf16 weights (the pack's) and f32 weights, at two head sizes; bf16 weights also with bf16
// activations (LoadOptions::activation_dtype, Transformers' arithmetic).
struct Shape {
  int64_t head_dim;
  at::ScalarType dtype;
  std::optional<at::ScalarType> activations;
};

class BatchInvarianceTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    ConfigureComputeThreads(0);
    model_ = TestModel(GetParam().head_dim, GetParam().dtype, GetParam().activations);
    ASSERT_NE(model_, nullptr);
    // Float activations (the CPU default) put every product on the linear kernel at any row
    // count. Only bf16 activations (SPECDEC_ACTIVATIONS=bf16) on an AVX-512 CPU without BF16
    // send products past the kernel's row limit to oneDNN, whose order depends on the row count.
    if (model_->activation_dtype() == at::kBFloat16 && LinearKernelMaxRows() < 512) {
      GTEST_SKIP() << "bf16 activations, and this CPU sends products of more than "
                   << LinearKernelMaxRows() << " rows to oneDNN";
    }
  }
  std::unique_ptr<Transformer> model_;
};

TEST_P(BatchInvarianceTest, LogitsAloneEqualThoseInMixedPassesOf2To32) {
  for (int n : {2, 3, 8, 17, 32}) {
    std::vector<Work> works;
    for (int s = 0; s < n; ++s) works.push_back(MakeWork(s));
    const std::vector<at::Tensor> batched = Pass(*model_, works);
    ASSERT_EQ(batched.size(), works.size());
    for (int s = 0; s < n; ++s) {
      const std::vector<at::Tensor> alone = Pass(*model_, {works[s]});
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_TRUE(alone[0].equal(batched[s]))
          << "sequence " << s << " (kind " << s % 4 << ") in a pass of " << n << ": max diff "
          << (alone[0] - batched[s]).abs().max().item<double>();
    }
  }
}

// Trees of 16 nodes over contexts of 13 to 47 tokens: branches at every depth, so that the
// ancestors of most nodes are not the rows just before them.
Work TreeWork(int seed) {
  Work w;
  w.context = Tokens(13 + 17 * seed, 500 + seed);
  w.tokens = Tokens(16, 600 + seed);
  w.parents = {-1, -1, 0, 1, 0, 2, 3, 4, 5, 5, 6, 8, 7, 11, 9, 13};
  const int past = static_cast<int>(w.context.size());
  for (size_t i = 0; i < w.parents.size(); ++i) {
    w.positions.push_back(w.parents[i] < 0 ? past : w.positions[w.parents[i]] + 1);
  }
  return w;
}

TEST_P(BatchInvarianceTest, ATreeRowsLogitsAreTheArStepsAtItsPosition) {
  for (int seed = 0; seed < 3; ++seed) {
    const Work tree = TreeWork(seed);
    const std::vector<at::Tensor> verified = Pass(*model_, {tree});
    ASSERT_EQ(verified.size(), 1u);
    for (size_t i = 0; i < tree.tokens.size(); ++i) {
      std::vector<int32_t> path;  // the node's ancestors, root first, then the node
      for (int32_t j = static_cast<int32_t>(i); j >= 0; j = tree.parents[j]) {
        path.insert(path.begin(), tree.tokens[j]);
      }
      auto cache = model_->NewCache();
      std::vector<int32_t> committed = tree.context;
      committed.insert(committed.end(), path.begin(), path.end() - 1);
      SequenceInput pre;
      pre.cache = cache.get();
      pre.tokens = committed;
      ASSERT_TRUE(model_->Forward(std::span<const SequenceInput>(&pre, 1)).ok());
      SequenceInput step;
      step.cache = cache.get();
      step.tokens = std::span<const int32_t>(&path.back(), 1);
      auto out = model_->Forward(std::span<const SequenceInput>(&step, 1));
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_TRUE((*out)[0].logits.equal(verified[0].narrow(0, i, 1)))
          << "context " << tree.context.size() << ", node " << i << " at depth " << path.size() - 1;
    }
  }
}

// A prompt prefilled in parts (chunked prefill: the target's scheduler splits a long prompt over
// iterations at whatever room each one has left) gives every row the logits of the whole prompt
// in one pass, bit for bit, whatever the split.
TEST_P(BatchInvarianceTest, APromptPrefilledInPartsEqualsItInOnePass) {
  const std::vector<int32_t> prompt = Tokens(61, 7);
  const std::vector<at::Tensor> whole = Pass(*model_, {Work{{}, prompt, {}, {}}});
  ASSERT_EQ(whole.size(), 1u);
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{1}, {32}, {16, 48}, {60}, {7, 8, 40}}) {
    auto cache = model_->NewCache();
    std::vector<at::Tensor> parts;
    int begin = 0;
    std::vector<int> ends = cuts;
    ends.push_back(static_cast<int>(prompt.size()));
    for (int end : ends) {
      SequenceInput in;
      in.cache = cache.get();
      in.tokens = std::span<const int32_t>(prompt).subspan(begin, end - begin);
      in.logits = LogitsMode::kAll;
      auto out = model_->Forward(std::span<const SequenceInput>(&in, 1));
      ASSERT_TRUE(out.ok()) << out.status();
      parts.push_back((*out)[0].logits);
      begin = end;
    }
    const at::Tensor chunked = at::cat(parts, 0);
    EXPECT_TRUE(chunked.equal(whole[0]))
        << "parts ending at " << ::testing::PrintToString(ends) << ": max diff "
        << (chunked - whole[0]).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchInvarianceTest,
                         ::testing::Values(Shape{16, at::kBFloat16}, Shape{64, at::kBFloat16},
                                           Shape{16, at::kBFloat16, at::kBFloat16},
                                           Shape{64, at::kBFloat16, at::kBFloat16},
                                           Shape{16, at::kFloat}, Shape{64, at::kFloat}),
                         [](const auto& info) {
                           return std::string(info.param.dtype == at::kFloat ? "f32" : "bf16") +
                                  (info.param.activations ? "_bf16_activations" : "") +
                                  "_head_dim_" + std::to_string(info.param.head_dim);
                         });

}  // namespace
}  // namespace specdec::model
