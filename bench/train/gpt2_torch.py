"""A plain-PyTorch GPT-2 equal to Kiln's (include/kiln/train/model.h), and its training step.

Used by bench/train/torch_train.py (the PyTorch side of the training benchmark and of the
learning comparison) and by tests/train/golden_parity.py (the reference Kiln's logits,
gradients and losses are checked against).

The model, as Kiln's (llm.c's train_gpt2.c):
- x = wte[tokens] + wpe[positions]; n_layer pre-norm blocks: x += attn.proj(attention(
  attn.qkv(ln_1(x)))); x += mlp.proj(gelu_tanh(mlp.fc(ln_2(x)))); then ln_f; logits = x wte^T.
- attn.qkv's output rows are q, then k, then v (each (C) with head h at h*D .. h*D+D-1);
  attention is causal softmax(q k^T / sqrt(D)) v per head. LayerNorm eps 1e-5.
- The vocabulary is NOT padded here: Kiln pads wte to Vp = 50304 rows for its GEMMs, but the pad
  rows are zero, never count in the loss and are not exported, so Kiln's logits, loss and
  gradients over V = 50257 are exactly this model's.
- Parameter names and shapes are the export format's (nn.Linear: weight (out, in)), so a Kiln
  safetensors file loads by name (load_kiln_weights) with every shape checked.
- Weight decay applies to 2-D tensors (Linear weights, wte, wpe), not to biases or LayerNorm;
  the schedule (learning_rate) is src/train/schedule.cc's; clipping is to a global L2 norm with
  Kiln's scale grad_clip / (norm + 1e-6) when norm > grad_clip (torch's clip_grad_norm_ rule).

Reading safetensors needs nothing but struct, json and torch.frombuffer.
"""
import json
import math
import os
import struct
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "lib"))
from train_config import GptConfig  # noqa: E402,F401  (part of this module's interface)

LAYERNORM_EPS = 1e-5  # GPT-2's, and Kiln's
INIT_STD = 0.02  # GPT-2's init of embeddings and Linear weights (the contract's)
# A safetensors header is a few KiB for GPT-2; a length above this is a corrupt file, not a
# header to allocate.
SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024
SAFETENSORS_DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16,
                      "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}
KILN_FORMAT = "kiln-gpt2"  # the export's __metadata__ "format"

# PyTorch's scaled_dot_product_attention: 1.13 has it only under its private name (2.0 made it
# public), and on CPU 1.13 runs it as the unfused math path (q k^T, mask, softmax, times v).
_SDPA = getattr(F, "scaled_dot_product_attention", None)
_SDPA_PRIVATE = getattr(F, "_scaled_dot_product_attention", None)


def read_safetensors(path):
    """(tensors {name: tensor}, metadata {str: str}) of a safetensors file. The tensors share
    one buffer holding the file; every offset is checked against the file and the dtype."""
    size = os.path.getsize(path)
    data = bytearray(size)
    with open(path, "rb") as fh:
        if fh.readinto(data) != size:
            raise ValueError(f"{path}: short read")
    if size < 8:
        raise ValueError(f"{path}: {size} bytes, no safetensors header length")
    (header_len,) = struct.unpack_from("<Q", data, 0)
    if header_len > min(SAFETENSORS_HEADER_MAX, size - 8):
        raise ValueError(f"{path}: header length {header_len} does not fit the {size}-byte file")
    header = json.loads(bytes(data[8:8 + header_len]))
    metadata = header.pop("__metadata__", {}) or {}
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        dtype = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {entry.get('dtype')}")
        shape = [int(d) for d in entry["shape"]]
        begin, end = (int(x) for x in entry["data_offsets"])
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if end - begin != numel * itemsize or begin < 0 or base + end > size:
            raise ValueError(f"{path}: tensor {name}: offsets [{begin}, {end}) do not hold "
                             f"{shape} of {entry['dtype']} inside the file")
        flat = torch.frombuffer(data, dtype=dtype, count=numel, offset=base + begin) \
            if numel else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape)
    return tensors, metadata


def config_from_metadata(metadata, path="weights"):
    if metadata.get("format") != KILN_FORMAT:
        raise ValueError(f"{path}: __metadata__ format is {metadata.get('format')!r}, not "
                         f"{KILN_FORMAT!r}")
    try:
        return GptConfig(**{k: int(metadata[k]) for k in
                            ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")})
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path}: __metadata__ lacks a model field: {e}") from e


def causal_attention_manual(q, k, v):
    """softmax(q k^T / sqrt(D) + causal mask) v on (B, H, T, D), written out: the reference."""
    t, d = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # (B, H, T, T)
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def causal_attention_sdpa(q, k, v):
    """PyTorch's own causal attention entry point (what an expert calls), same result; in 1.13 on
    CPU the unfused math attention."""
    if _SDPA is not None:
        return _SDPA(q, k, v, is_causal=True)
    return _SDPA_PRIVATE(q, k, v, is_causal=True)[0]


ATTENTION = {"manual": causal_attention_manual, "sdpa": causal_attention_sdpa}
DEFAULT_ATTENTION = "sdpa" if (_SDPA or _SDPA_PRIVATE) else "manual"


class CausalSelfAttention(nn.Module):
    def __init__(self, config, attend):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attend = attend

    def forward(self, x):
        b, t, c = x.shape
        h = self.n_head
        q, k, v = self.qkv(x).split(c, dim=2)  # (B, T, C) each: Kiln's q, k, v row blocks
        q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        y = self.attend(q, k, v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config, attend):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=LAYERNORM_EPS)
        self.attn = CausalSelfAttention(config, attend)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=LAYERNORM_EPS)
        self.mlp = Mlp(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    """Parameter names are the export's: wte.weight, wpe.weight, h.{i}.ln_1.weight, ...,
    ln_f.bias."""

    def __init__(self, config, attention=DEFAULT_ATTENTION):
        super().__init__()
        self.config = config
        attend = ATTENTION[attention]
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config, attend) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=LAYERNORM_EPS)

    def forward(self, tokens, targets=None):
        """tokens, targets: (B, T) int64. Returns (logits (B, T, V), mean cross-entropy loss
        or None)."""
        t = tokens.shape[1]
        if t > self.config.block_size:
            raise ValueError(f"sequence of {t} tokens exceeds block_size "
                             f"{self.config.block_size}")
        pos = torch.arange(t, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head over the unpadded V
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def init_weights(self, seed):
        """The contract's distribution (not Kiln's draws: an equal start needs Kiln's export):
        normal(0, 0.02) embeddings and Linear weights, the residual projections 0.02 /
        sqrt(2 n_layer), zero biases, LayerNorm (1, 0)."""
        g = torch.Generator().manual_seed(seed)
        residual_std = INIT_STD / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                    name == "ln_f.weight":
                p.fill_(1.0)
            elif p.dim() == 1:
                p.zero_()
            else:
                std = residual_std if name.endswith(("attn.proj.weight", "mlp.proj.weight")) \
                    else INIT_STD
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)


def load_kiln_weights(path, dtype=torch.float32, attention=DEFAULT_ATTENTION):
    """A Gpt2 of the file's config with the file's weights (Kiln's export format), in dtype."""
    tensors, metadata = read_safetensors(path)
    config = config_from_metadata(metadata, path)
    model = Gpt2(config, attention=attention).to(dtype)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError(f"{path}: tensors differ from the model's: missing {missing[:4]}, "
                         f"unexpected {extra[:4]}")
    with torch.no_grad():
        for name, p in params.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError(f"{path}: {name} has shape {list(tensors[name].shape)}, the "
                                 f"model wants {list(p.shape)}")
            p.copy_(tensors[name])
    return model


def param_groups(model, weight_decay):
    """AdamW groups: 2-D tensors decay, the rest (biases, LayerNorm) do not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


@dataclass(frozen=True)
class Hyper:
    """The optimizer and schedule part of a config's `train:` section."""
    lr: float
    min_lr: float
    warmup_steps: int
    max_steps: int
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    grad_clip: float


def make_optimizer(model, hyper):
    return torch.optim.AdamW(param_groups(model, hyper.weight_decay), lr=hyper.lr,
                             betas=(hyper.beta1, hyper.beta2), eps=hyper.eps, foreach=True)


def learning_rate(hyper, step):
    """src/train/schedule.cc: lr * s / warmup for s <= warmup, then cosine from lr to min_lr
    at max_steps (and min_lr beyond). Steps count from 1."""
    if step <= hyper.warmup_steps:
        return hyper.lr * step / hyper.warmup_steps
    if step >= hyper.max_steps:
        return hyper.min_lr
    r = (step - hyper.warmup_steps) / (hyper.max_steps - hyper.warmup_steps)
    return hyper.min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (hyper.lr - hyper.min_lr)


def clip_and_step(model, optimizer, hyper, step):
    """After the backward: the global gradient norm (returned, before clipping), clipping to
    grad_clip (0: none), the step's learning rate on every group, one AdamW step."""
    if hyper.grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.grad_clip)
    else:
        norm = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in model.parameters()]))
    lr = learning_rate(hyper, step)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return float(norm), lr
