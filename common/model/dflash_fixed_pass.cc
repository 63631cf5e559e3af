// Fixed draft passes (design.md §2.9): one sequence's DFlash draft of a given block size b whose
// every tensor keeps its address from one step to the next, so that a CUDA graph captured once
// replays it. Its new context rows are padded to b (a verify of a b-token block commits at most b
// tokens): the features are copied into a [b, F] input, the context's first slot, the block's
// first slot and the last token into an int64 input. The padded rows' keys and values land in
// slots the block's rows overwrite or that lie past the block, which the mask hides; the cache
// commits only the real rows.
#include <ATen/ATen.h>

#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "common/model/cuda_graph.h"
#include "common/model/dflash_drafter.h"
#include "common/model/dflash_internal.h"
#include "common/model/fixed_pass_set.h"
#include "common/model/ops.h"

namespace specdec::model {

struct DFlashDrafter::FixedPass {
  PassCapture capture;  // declared first: its graph is freed after the tensors it wrote
  int64_t block = 0;
  at::Tensor ints;      // int64 [3] on the device: first context slot, first block slot, last token
  at::Tensor features;  // [block, F] on the device: the new context rows' features, padded
  at::Tensor logits;    // float [block - 1, vocab] on the device
};

bool DFlashDrafter::TakesFixedPass(const DraftInput& in) const {
  const int64_t m = in.new_features.defined() ? in.new_features.size(0) : 0;
  return (target_.captures_graphs() || target_.uncaptured_fixed_passes()) && m <= in.block_size;
}

void DFlashDrafter::RunFixedPassBody(FixedPass& pass, const KvCache& cache) const {
  const int64_t b = pass.block, capacity = cache.capacity();
  const at::TensorOptions ints = pass.ints.options();
  const at::Tensor ctx_slots = pass.ints.narrow(0, 0, 1) + at::arange(b, ints);
  const at::Tensor blk_slots = pass.ints.narrow(0, 1, 1) + at::arange(b, ints);
  // Row 0 the last token, the others the mask token.
  const at::Tensor blk_tok = at::where(at::arange(b, ints).eq(0), pass.ints.narrow(0, 2, 1),
                                       static_cast<int64_t>(config_.mask_token_id));
  // A block row sees every slot before the block's end: the context, then the whole block.
  at::Tensor mask = at::zeros({b, capacity}, ints.dtype(at::kFloat));
  mask.masked_fill_(at::arange(capacity, ints).ge(blk_slots.narrow(0, b - 1, 1) + 1).unsqueeze(0),
                    -std::numeric_limits<float>::infinity());
  mask =
      PrepareRecurringMask(mask, target_.activation_dtype(),
                           config_.layers.num_attention_heads / config_.layers.num_key_value_heads);
  const DraftAttend attend = [&](int64_t l, const at::Tensor& q, const at::Tensor& k_b,
                                 const at::Tensor& v_b, const at::Tensor& k_c,
                                 const at::Tensor& v_c) {
    const at::Tensor& keys = cache.KeyBuffer(l);
    const at::Tensor& values = cache.ValueBuffer(l);
    // The context first: the block's rows overwrite the padded rows' slots they share.
    keys.index_copy_(1, ctx_slots, k_c.transpose(0, 1).to(keys.scalar_type()));
    values.index_copy_(1, ctx_slots, v_c.transpose(0, 1).to(values.scalar_type()));
    keys.index_copy_(1, blk_slots, k_b.transpose(0, 1).to(keys.scalar_type()));
    values.index_copy_(1, blk_slots, v_b.transpose(0, 1).to(values.scalar_type()));
    return Attention(q, keys, values, mask, /*recurring_shape=*/true);
  };
  // Positions are slots: the drafter's cache holds every position from 0.
  const DraftPassRows rows{pass.features, ctx_slots, blk_tok, blk_slots};
  const at::Tensor normed = RunDraftPass(*weights_, config_.layers, target_, rows, attend);
  pass.logits = target_.DeviceLogits(normed.narrow(0, 1, b - 1));
}

std::optional<std::vector<at::Tensor>> DFlashDrafter::RunFixedPass(const DraftInput& in) const {
  KvCache& cache = *in.cache;
  const int64_t b = in.block_size;
  const int64_t m = in.new_features.defined() ? in.new_features.size(0) : 0;
  cache.Reserve(m + b);  // may move the buffers, which drops their passes
  bool is_new = false;
  FixedPass& pass = FixedPassSet<int64_t, FixedPass>::Of(cache).Use(b, &is_new);
  if (is_new) {
    pass.block = b;
    const c10::Device device = target_.device();
    pass.ints = at::empty({3}, at::TensorOptions().dtype(at::kLong).device(device));
    const int64_t width =
        static_cast<int64_t>(config_.target_layer_ids.size()) * target_.config().hidden_size;
    pass.features =
        at::zeros({b, width}, at::TensorOptions().dtype(target_.activation_dtype()).device(device));
  }
  const bool capturing = !target_.uncaptured_fixed_passes();
  // A block size's first use takes the general path, as a target's pass shape does.
  if (pass.capture.SkipsThisUse(capturing)) return std::nullopt;

  const bool pinned = pass.ints.device().is_cuda();
  at::Tensor host = at::empty({3}, at::TensorOptions().dtype(at::kLong).pinned_memory(pinned));
  int64_t* p = host.data_ptr<int64_t>();
  p[0] = cache.length();
  p[1] = cache.length() + m;
  p[2] = in.last_token;
  pass.ints.copy_(host, /*non_blocking=*/true);
  if (m > 0) pass.features.narrow(0, 0, m).copy_(in.new_features, /*non_blocking=*/true);
  const auto body = [&] { RunFixedPassBody(pass, cache); };
  pass.capture.Run(body);
  // The step's one wait for the device: the draft logits on the host.
  std::vector<at::Tensor> out{pass.logits.to(at::kCPU)};
  pass.capture.CaptureIfDue(capturing, target_.device().index(), body, &captured_graphs_);
  cache.Commit(m);
  return out;
}

}  // namespace specdec::model
