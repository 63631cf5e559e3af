#include "train/train_command.h"

#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "train/data_command.h"
#include "train/dflash_trainer.h"
#include "train/lm_trainer.h"
#include "train/policy_trainer.h"

namespace specdec::train {
namespace {

void Report(const char* name, const absl::Status& status, int* exit_code) {
  if (!status.ok()) {
    std::cerr << "specdec train " << name << ": " << status << "\n";
    *exit_code = 1;
  }
}

// The flags of a trainer's optimization and run (`Options` has fields of these names): the
// learning-rate schedule, AdamW, dtypes, device and threads, evaluation and checkpoint cadence,
// seed and time budget. Each shows its default.
template <typename Options>
void AddOptimizationFlags(CLI::App* cmd, Options* o) {
  cmd->add_option("--lr", o->lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr-ratio", o->min_lr_ratio, "final lr / peak")->capture_default_str();
  cmd->add_option("--warmup", o->warmup_frac, "warmup share of steps")->capture_default_str();
  cmd->add_option("--weight-decay", o->weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--clip", o->clip, "gradient clip norm")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "compute dtype f32|bf16")->capture_default_str();
  cmd->add_option("--export-dtype", o->export_dtype, "exported weights f32|bf16")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->capture_default_str();
  cmd->add_option("--eval-every", o->eval_every, "steps between held-out evaluations")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->add_option("--time-budget", o->time_budget_s,
                  "training seconds; shrink --steps to fit (0 = off)");
}

void AddLm(CLI::App& parent, int* exit_code) {
  auto o = std::make_shared<LmTrainOptions>();
  o->config.architecture = model::Architecture::kQwen3;
  o->config.qk_norm = true;
  o->config.tie_word_embeddings = true;
  o->config.hidden_size = 256;
  o->config.intermediate_size = 768;
  o->config.num_hidden_layers = 4;
  o->config.num_attention_heads = 4;
  o->config.num_key_value_heads = 2;
  o->config.max_position_embeddings = 2048;
  o->config.rope_theta = 10000;
  auto* cmd = parent.add_subcommand("lm", "Pretrain a Qwen3-architecture causal LM on a token file");
  cmd->add_option("--train", o->train_tokens, "training token file")->required();
  cmd->add_option("--heldout", o->heldout_tokens, "held-out token file");
  cmd->add_option("--tokenizer", o->tokenizer_dir, "directory with tokenizer.json")->required();
  cmd->add_option("--out", o->out_dir, "output HF directory")->required();
  cmd->add_option("--checkpoint", o->checkpoint_dir, "checkpoint directory (default <out>/checkpoint)");
  cmd->add_option("--hidden", o->config.hidden_size, "hidden size")->capture_default_str();
  cmd->add_option("--intermediate", o->config.intermediate_size, "MLP width")->capture_default_str();
  cmd->add_option("--layers", o->config.num_hidden_layers, "decoder layers")->capture_default_str();
  cmd->add_option("--heads", o->config.num_attention_heads, "attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", o->config.num_key_value_heads, "KV heads")->capture_default_str();
  cmd->add_option("--max-position", o->config.max_position_embeddings, "context length")
      ->capture_default_str();
  cmd->add_option("--rope-theta", o->config.rope_theta, "RoPE base")->capture_default_str();
  cmd->add_option("--batch", o->batch_size, "sequences per micro-batch")->capture_default_str();
  cmd->add_option("--seq-len", o->seq_len, "tokens per sequence")->capture_default_str();
  cmd->add_option("--grad-accum", o->grad_accum, "micro-batches per step")->capture_default_str();
  cmd->add_option("--steps", o->steps, "optimizer steps")->capture_default_str();
  AddOptimizationFlags(cmd, o.get());
  cmd->add_option("--eval-batches", o->eval_batches, "held-out batches")->capture_default_str();
  cmd->callback([o, exit_code] {
    o->config.head_dim = o->config.hidden_size / o->config.num_attention_heads;
    Report("lm", TrainLm(*o), exit_code);
  });
}

void AddDFlash(CLI::App& parent, int* exit_code) {
  auto o = std::make_shared<DFlashTrainOptions>();
  auto* cmd = parent.add_subcommand(
      "dflash", "Train a DFlash block-diffusion drafter against a frozen target on its generations");
  cmd->add_option("--target", o->target_dir, "target HF directory")->required();
  cmd->add_option("--prompts", o->prompt_tokens, "token file the prompts are drawn from")
      ->required();
  cmd->add_option("--out", o->out_dir, "output drafter directory")->required();
  cmd->add_option("--checkpoint", o->checkpoint_dir, "checkpoint directory (default <out>/checkpoint)");
  cmd->add_option("--layers", o->layers, "drafter layers")->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads (0 = target's)")->capture_default_str();
  cmd->add_option("--kv-heads", o->kv_heads, "KV heads (0 = target's)")->capture_default_str();
  cmd->add_option("--intermediate", o->intermediate, "MLP width (0 = target's)")
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size, "training block size B")->capture_default_str();
  cmd->add_option("--gamma", o->gamma, "loss decay (0 = 7 for B>=16, else 4)")->capture_default_str();
  cmd->add_option("--gen-sequences", o->gen_sequences, "sequences to generate")->capture_default_str();
  cmd->add_option("--prompt-len", o->prompt_len, "prompt tokens")->capture_default_str();
  cmd->add_option("--gen-len", o->gen_len, "generated tokens per sequence")->capture_default_str();
  cmd->add_option("--gen-batch", o->gen_batch, "generation batch")->capture_default_str();
  cmd->add_option("--greedy-frac", o->greedy_frac, "share decoded greedily")->capture_default_str();
  cmd->add_option("--batch", o->batch_size, "sequences per step")->capture_default_str();
  cmd->add_option("--anchors", o->anchors, "anchors per sequence")->capture_default_str();
  cmd->add_option("--steps", o->steps, "optimizer steps")->capture_default_str();
  AddOptimizationFlags(cmd, o.get());
  cmd->callback([o, exit_code] { Report("dflash", TrainDFlash(*o), exit_code); });
}

void AddPolicy(CLI::App& parent, int* exit_code) {
  auto d = std::make_shared<PolicyDataOptions>();
  auto* data = parent.add_subcommand(
      "policy-data",
      "Label prompts for BlockPilot: run the DFlash loop and record the target's last-token "
      "logits with the share of steps accepting each draft position (acceptance) or the tau "
      "of every candidate block size (candidates); parallel, resumable");
  data->add_option("--target", d->target_dir, "target HF directory")->required();
  data->add_option("--dflash", d->dflash_dir, "DFlash drafter directory")->required();
  data->add_option("--prompts", d->prompt_tokens, "token file prompts are cut from")->required();
  data->add_option("--out", d->out_dir, "output directory")->required();
  data->add_option("--num-prompts", d->num_prompts, "prompts")->capture_default_str();
  data->add_option("--min-prompt-len", d->min_prompt_len, "shortest prompt")->capture_default_str();
  data->add_option("--max-prompt-len", d->max_prompt_len, "longest prompt")->capture_default_str();
  data->add_option("--max-new-tokens", d->max_new_tokens, "tokens generated per run")
      ->capture_default_str();
  data->add_option("--labels", d->labels, "acceptance | candidates")->capture_default_str();
  data->add_option("--max-block", d->max_block, "acceptance: block drafted (0 = training B)")
      ->capture_default_str();
  data->add_option("--radius", d->radius, "candidates B-k..B+k")->capture_default_str();
  data->add_option("--block-sizes", d->block_sizes, "explicit candidate block sizes");
  data->add_option("--temperature", d->temperature, "sampling temperature")->capture_default_str();
  data->add_option("--part-size", d->part_size, "prompts per part file")->capture_default_str();
  data->add_option("--workers", d->workers, "parallel decoders (0 = cores)")->capture_default_str();
  data->add_option("--seed", d->seed, "random seed")->capture_default_str();
  data->callback([d, exit_code] { Report("policy-data", MakePolicyData(*d), exit_code); });

  auto o = std::make_shared<PolicyTrainOptions>();
  auto* cmd = parent.add_subcommand("policy", "Train the BlockPilot MLP on policy-data labels");
  cmd->add_option("--data", o->data_dir, "policy-data directory")->required();
  cmd->add_option("--out", o->out_dir, "output BlockPilot directory")->required();
  cmd->add_option("--hidden", o->hidden, "MLP width")->capture_default_str();
  cmd->add_option("--input-top-k", o->input_top_k,
                  "input: the k largest log-probabilities (0 = the raw logits)")
      ->capture_default_str();
  cmd->add_option("--epochs", o->epochs, "epochs")->capture_default_str();
  cmd->add_option("--batch", o->batch_size, "batch size")->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate")->capture_default_str();
  cmd->add_option("--weight-decay", o->weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--dropout", o->dropout, "dropout")->capture_default_str();
  cmd->add_option("--heldout-frac", o->heldout_frac, "held-out share")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->callback([o, exit_code] { Report("policy", TrainPolicy(*o), exit_code); });
}

}  // namespace

void RegisterTrainSubcommands(CLI::App& parent, int* exit_code) {
  parent.require_subcommand(1);
  RegisterDataSubcommands(parent, exit_code);
  AddLm(parent, exit_code);
  AddDFlash(parent, exit_code);
  AddPolicy(parent, exit_code);
}

}  // namespace specdec::train
