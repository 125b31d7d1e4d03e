#!/usr/bin/env python3
"""Checks poplar-worker's Hugging Face import and export against PyTorch.

    check_hf_import.py WORKER WORK_DIR

For a small GPT-2 and a small Llama made by PyTorch (reference_gpt.py, reference_llama.py),
writes a Hugging Face model folder as Transformers' save_pretrained lays it out, with
torch and json alone: config.json in Transformers' keys, and the weights in safetensors
(GPT-2 as the hub's gpt2 holds it: names without `transformer.`, Conv1D weights
[in, out], no lm_head, the old attn.bias buffers; the Llama sharded in two files with
model.safetensors.index.json). poplar-worker then trains STEPS steps on 2 ranks at
stage 3 with `--model-config FOLDER --init FOLDER --save OUT.safetensors`, PyTorch the
same steps from the same model, and Python reads OUT.safetensors back.

Passes when every step's loss is PyTorch's within 1e-5 (the first step's loss is the
imported model's cross-entropy on the first batch: its logits are the reference's),
every tensor read back is within 1e-4 of PyTorch's, and the logits of a model loaded
from OUT.safetensors are within 1e-4 of PyTorch's trained model's.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_gpt as ref  # noqa: E402
from check_equivalence import write_sentences  # noqa: E402
from safetensors_spec import read, write  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker_ranks import read_metrics, start_ranks, wait_ranks, write_plan  # noqa: E402

STEPS, BATCH, LR = 3, 12, 1e-3
PLAN = [[5, 3, 0], [2, 1, 1]]
MODELS = {
    "gpt2": {"arch": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 256, "block_size": 32},
    "llama": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 32, "intermediate_size": 88,
              "vocab_size": 256, "block_size": 32, "rope_theta": 10000.0, "norm_eps": 1e-5, "tie_embeddings": False},
}
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def hf_config(c):
    """config.json in Transformers' keys."""
    if c["arch"] == "gpt":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": c["n_layer"],
                "n_head": c["n_head"], "n_embd": c["n_embd"], "vocab_size": c["vocab_size"],
                "n_positions": c["block_size"], "n_ctx": c["block_size"], "activation_function": "gelu",
                "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "torch_dtype": "float32"}
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": c["n_layer"],
            "num_attention_heads": c["n_head"], "num_key_value_heads": c["n_kv_head"], "hidden_size": c["n_embd"],
            "intermediate_size": c["intermediate_size"], "vocab_size": c["vocab_size"],
            "max_position_embeddings": c["block_size"], "rope_theta": c["rope_theta"], "rms_norm_eps": c["norm_eps"],
            "tie_word_embeddings": c["tie_embeddings"], "hidden_act": "silu", "rope_scaling": None,
            "attention_bias": False, "torch_dtype": "float32"}


def to_gpt2_hub(state):
    """nanoGPT's state dict as the hub's gpt2 model.safetensors holds it."""
    hub = {}
    for name, tensor in state.items():
        if name == "lm_head.weight":
            continue
        short = name[len("transformer."):]
        hub[short] = tensor.t().contiguous() if name.endswith(CONV1D) else tensor
        if name.endswith(".attn.c_attn.weight"):  # GPT-2's causal-mask buffer, which readers ignore
            T = 32
            hub[short.replace("c_attn.weight", "bias")] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    return hub


def from_gpt2_layout(hf):
    """Transformers' GPT-2 names and layout (with the transformer. prefix) -> nanoGPT's."""
    return {name: (t.t() if name.endswith(CONV1D) else t) for name, t in hf.items()}


def write_folder(folder, config, state):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config(config), f)
    if config["arch"] == "gpt":
        write(os.path.join(folder, "model.safetensors"), to_gpt2_hub(state), {"format": "pt"})
        return
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, members in shards.items():
        write(os.path.join(folder, shard), {n: state[n] for n in members}, {"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * 4 for t in state.values())},
             "weight_map": {n: shard for shard, members in shards.items() for n in members}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)


def pytorch_training(config, init, tokens_path):
    model = ref.make_model(config)
    model.load_state_dict(init)
    tokens = ref.Tokens(tokens_path, config["block_size"])
    opt = ref.optimizer(model, LR)
    losses = [ref.train_step(model, opt, tokens, step, BATCH, 4) for step in range(STEPS)]
    return model, losses, tokens


def check(worker, work, name, config, tokens_path):
    torch.manual_seed(1)
    init = {k: v.detach().clone() for k, v in ref.make_model(config).state_dict().items()}
    folder = os.path.join(work, name)
    write_folder(folder, config, init)
    out, metrics = os.path.join(work, f"{name}-trained.safetensors"), os.path.join(work, f"{name}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    plan = write_plan(os.path.join(work, "plan.json"), 3, PLAN, BATCH)
    command = [worker, "train", "--plan", plan, "--model-config", folder, "--init", folder, "--data", tokens_path,
               "--steps", str(STEPS), "--save", out, "--lr", str(LR), "--log-every", "0", "--metrics", metrics]
    if any(wait_ranks(start_ranks([command] * len(PLAN)))):
        sys.exit(f"{name}: poplar-worker failed")
    model, losses, tokens = pytorch_training(config, init, tokens_path)
    poplar_losses = [line["loss"] for line in read_metrics(metrics)]
    saved, metadata, _ = read(out)
    if config["arch"] == "gpt":
        saved = from_gpt2_layout(saved)
    expected = model.state_dict()
    fresh = ref.make_model(config)
    fresh.load_state_dict({**saved, **({"lm_head.weight": saved["transformer.wte.weight"]}
                                       if config["arch"] == "gpt" else {})})
    x, _ = tokens.batch(0, 4)
    with torch.no_grad():
        logits = (fresh(x) - model(x)).abs().max().item()
    loss_error = max(abs(a - b) for a, b in zip(poplar_losses, losses)) if len(poplar_losses) == STEPS else 1.0
    weights = max((saved[k] - expected[k]).abs().max().item() for k in saved)
    missing = set(expected) - set(saved) - ({"lm_head.weight"} if config["arch"] == "gpt" else set())
    print(f"{name}: losses {', '.join(f'{v:.4f}' for v in poplar_losses)} (PyTorch within {loss_error:.1e}); "
          f"saved weights within {weights:.1e}, logits within {logits:.1e}; format {metadata.get('format')}"
          + (f"; missing {sorted(missing)}" if missing else ""))
    return max(loss_error / 1e-5, weights / 1e-4, logits / 1e-4, 0.0 if not missing else float("inf"))


def main():
    worker, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    tokens_path = os.path.join(work, "tokens.bin")
    write_sentences(tokens_path)
    worst = max(check(worker, work, name, config, tokens_path) for name, config in MODELS.items())
    sys.exit(0 if worst <= 1.0 else 1)


if __name__ == "__main__":
    main()
