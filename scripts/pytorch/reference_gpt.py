"""PyTorch's own training of poplar's GPT, for checks and benchmarks against poplar-worker.

The model is nanoGPT's GPT-2 (same parameter names, pre-LayerNorm blocks with biases,
learned positions, causal attention, exact GELU, no dropout, head tied to wte); the
data, loss, clipping and AdamW follow docs/worker.md, so one step here is the step
poplar-worker takes on the same global batch.
"""
import json
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])
        size = c["block_size"]
        # A plain attribute, not a buffer: DDP cannot broadcast bool buffers over Gloo.
        # (PyTorch 1.x only: PyTorch 2 attends through scaled_dot_product_attention.)
        self.mask = torch.tril(torch.ones(size, size, dtype=torch.bool))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: fused, as poplar-worker
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        # nanoGPT's initialisation: normal(0, 0.02), residual projections scaled down.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln_" not in name:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def load_config(path):
    with open(path) as f:
        return json.load(f)


def make_model(config):
    """The model the config's arch names: this GPT, or reference_llama's Llama."""
    if config["arch"] == "llama":
        import reference_llama
        return reference_llama.Llama(config)
    return GPT(config)


def layer_class(config):
    """The class of the model's repeated layer (what FSDP wraps and checkpoints)."""
    if config["arch"] == "llama":
        import reference_llama
        return reference_llama.Layer
    return Block


class Tokens:
    """docs/formats.md: sample k = tokens[kL, kL+L), targets shifted by one. The file is
    headerless uint16 (nanoGPT's .bin) or has the 16-byte header ("POPLARTK", version 1,
    width 16 or 32), read by planner/formats/token_file.h's rules."""

    def __init__(self, path, block_size, vocab_size=None):
        self.tokens = torch.from_numpy(Tokens.read(path, vocab_size).astype(np.int64))
        self.L = block_size
        self.samples = (len(self.tokens) - 1) // block_size

    @staticmethod
    def read(path, vocab_size=None):
        """The ids of a token file, as numpy uint16 or uint32; ValueError naming the file
        and the byte offset for what poplar refuses."""
        data = np.fromfile(path, dtype=np.uint8)
        offset, width = 0, 16
        if data[:8].tobytes() == b"POPLARTK":
            if len(data) < 16:
                raise ValueError(f"{path}: byte {len(data)} (header): the file ends inside the 16-byte header")
            version, width = (int(v) for v in data[8:16].view("<u4"))
            if version != 1:
                raise ValueError(f"{path}: byte 8 (header version): is {version}; this reads version 1")
            if width not in (16, 32):
                raise ValueError(f"{path}: byte 12 (header token width): is {width} bits; a token is 16 or 32 bits")
            offset = 16
        size = width // 8
        if (len(data) - offset) % size:
            whole = offset + (len(data) - offset) // size * size
            raise ValueError(f"{path}: byte {whole}: the file ends inside a token")
        ids = data[offset:].view("<u2" if width == 16 else "<u4")
        if vocab_size is not None and len(ids) and int(ids.max()) >= vocab_size:
            at = int(np.argmax(ids >= vocab_size))
            raise ValueError(f"{path}: token {at} (byte {offset + at * size}): id {int(ids[at])} "
                             f"is outside the model's vocabulary of {vocab_size}")
        return ids

    def batch(self, first, count):
        index = [(first + i) % self.samples for i in range(count)]
        x = torch.stack([self.tokens[k * self.L:(k + 1) * self.L] for k in index])
        y = torch.stack([self.tokens[k * self.L + 1:(k + 1) * self.L + 1] for k in index])
        return x, y


def parameter_groups(named_parameters, weight_decay=0.1):
    """AdamW's two groups, by poplar-worker's rule: matrices and embeddings decay, biases
    and norms (GPT's ln_*, Llama's *norm) do not. Chosen by name, not shape: FSDP may
    flatten parameters."""
    named = list(named_parameters)
    decays = lambda name: name.endswith(".weight") and "ln_" not in name and "norm" not in name
    return [{"params": [p for n, p in named if decays(n)], "weight_decay": weight_decay},
            {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0}]


def optimizer(model, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    return torch.optim.AdamW(parameter_groups(model.named_parameters(), weight_decay), lr=lr, betas=betas, eps=eps)


def train_step(model, opt, tokens, step, global_batch, micro_batch, grad_clip=1.0):
    """One step on global batch `step`, accumulated in micro-batches; mean loss."""
    opt.zero_grad(set_to_none=True)
    total = 0.0
    first = step * global_batch
    for start in range(0, global_batch, micro_batch):
        count = min(micro_batch, global_batch - start)
        x, y = tokens.batch(first + start, count)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="sum")
        (loss / (global_batch * tokens.L)).backward()
        total += loss.item()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return total / (global_batch * tokens.L)
