"""PyTorch's own Llama, with Hugging Face's LlamaForCausalLM semantics and names.

Plain torch.nn (transformers is not needed): no biases, RMSNorm in fp32, rotary
embeddings with HF's rotate-half convention and inv_freq = 1 / theta^(2i/d), causal
attention with grouped-query heads (HF's repeat_kv), SwiGLU MLP, final RMSNorm, lm_head
(tied to embed_tokens when tie_embeddings). HF's initialisation: normal(0, 0.02) for
every matrix and the embedding, norm weights 1. Its state_dict() keys are HF's.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def defaults(c):
    """The model config with poplar's defaults filled in (docs/formats.md)."""
    c = dict(c)
    c.setdefault("n_kv_head", c["n_head"])
    c.setdefault("intermediate_size", (-(-8 * c["n_embd"] // 3) + 255) // 256 * 256)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("norm_eps", 1e-6)
    c.setdefault("tie_embeddings", False)
    return c


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        wide = x.to(torch.float32)
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * wide.to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_kv_head = c["n_head"], c["n_kv_head"]
        self.head_dim = c["n_embd"] // c["n_head"]
        self.q_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=False)
        self.k_proj = nn.Linear(c["n_embd"], self.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c["n_embd"], self.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        heads = lambda t, n: t.view(B, T, n, self.head_dim).transpose(1, 2)
        q = heads(self.q_proj(x), self.n_head)
        k = heads(self.k_proj(x), self.n_kv_head)
        v = heads(self.v_proj(x), self.n_kv_head)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        if rep > 1:  # HF's repeat_kv
            k = k[:, :, None].expand(B, self.n_kv_head, rep, T, self.head_dim).reshape(B, self.n_head, T, self.head_dim)
            v = v[:, :, None].expand(B, self.n_kv_head, rep, T, self.head_dim).reshape(B, self.n_head, T, self.head_dim)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["n_embd"], c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(c["n_embd"], c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], c["n_embd"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["n_embd"], c["norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["n_embd"], c["norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        c = defaults(c)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.model.layers = nn.ModuleList([Layer(c) for _ in range(c["n_layer"])])
        self.model.norm = RMSNorm(c["n_embd"], c["norm_eps"])
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        if c["tie_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight
        head_dim = c["n_embd"] // c["n_head"]
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        angles = torch.outer(torch.arange(c["block_size"], dtype=torch.float32), inv_freq)
        both = torch.cat((angles, angles), dim=-1)
        # Plain attributes, not buffers: they stay out of state_dict(), as HF's are non-persistent.
        self.rope_cos, self.rope_sin = both.cos(), both.sin()
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        T = idx.size(1)
        x = self.model.embed_tokens(idx)
        cos = self.rope_cos[:T].to(device=x.device, dtype=x.dtype)
        sin = self.rope_sin[:T].to(device=x.device, dtype=x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))
