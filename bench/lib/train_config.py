"""Kiln's training config (configs/*.yaml) and model counts, in plain Python (no torch).

Read by bench/train/torch_train.py (which trains what the file says), bench/train/run (which
needs the model's FLOP count and writes derived configs) and bench/train/gpt2_torch.py.

- load(path, overrides) mirrors include/kiln/train/train_config.h: `model` keys and
  `data.train` required, every `train` key optional with TrainHyperparams' default, flags
  override the file; the ranges a benchmark can get wrong are checked (Kiln checks them all).
- GptConfig.num_params is Kiln's Gpt2::num_params (every exported tensor, no pad rows) and
  flops_per_token(seq) its 6 N + 6 L C T (llm.c's MFU count: 6 flops per weight per token for
  the forward and backward matmuls, plus causal attention, PaLM's 12 L C T halved).
"""
from dataclasses import dataclass

import yaml

# TrainHyperparams' defaults (include/kiln/train/train_config.h).
TRAIN_DEFAULTS = {"batch": 8, "seq": 256, "grad_accum": 1, "max_steps": 300, "lr": 6e-4,
                  "min_lr": 6e-5, "warmup_steps": 30, "weight_decay": 0.1, "beta1": 0.9,
                  "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0, "val_every": 50,
                  "val_batches": 10, "seed": 1337, "threads": 2}
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")
POSITIVE_KEYS = ("batch", "seq", "grad_accum", "max_steps", "threads")
THREADS_MAX = 1024  # Kiln's kThreadsMax
VOCAB_PAD_MULTIPLE = 128  # Kiln's padded vocabulary: 50257 -> 50304 (model.h)


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class GptConfig:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int

    @property
    def padded_vocab(self):
        m = VOCAB_PAD_MULTIPLE
        return (self.vocab_size + m - 1) // m * m

    @property
    def num_params(self):
        c = self.n_embd
        per_layer = 12 * c * c + 13 * c  # ln_1 2C, qkv 3C^2+3C, proj C^2+C, ln_2 2C, fc, proj
        return (self.vocab_size * c + self.block_size * c + self.n_layer * per_layer + 2 * c)

    def flops_per_token(self, seq):
        return 6.0 * self.num_params + 6.0 * self.n_layer * self.n_embd * seq


@dataclass(frozen=True)
class TrainConfig:
    model: GptConfig
    train: dict  # every TRAIN_DEFAULTS key
    data: dict  # "train", and "val" while val_batches > 0
    doc: dict  # the file as read, for writing derived configs


def load(path, overrides=None):
    """The config at `path` with `overrides` ({train key: value}, None values ignored)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: {e}") from e
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), dict)
                                            for k in ("model", "data")):
        raise ConfigError(f"{path}: needs model: and data: mappings")
    unknown = set(doc.get("train") or {}) - set(TRAIN_DEFAULTS)
    if unknown:
        raise ConfigError(f"{path}: unknown train keys {sorted(unknown)}")
    try:
        model = GptConfig(**{k: int(doc["model"][k]) for k in MODEL_KEYS})
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: model: {e}") from e
    train = dict(TRAIN_DEFAULTS, **(doc.get("train") or {}))
    train.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for key in POSITIVE_KEYS:
        if not isinstance(train[key], int) or train[key] < 1:
            raise ConfigError(f"{path}: train.{key} must be a positive integer, not "
                              f"{train[key]!r}")
    if train["threads"] > THREADS_MAX:
        raise ConfigError(f"train.threads {train['threads']} exceeds {THREADS_MAX}")
    if train["seq"] > model.block_size:
        raise ConfigError(f"train.seq {train['seq']} exceeds model.block_size "
                          f"{model.block_size}")
    data = doc["data"]
    if "train" not in data or (train["val_batches"] > 0 and "val" not in data):
        raise ConfigError(f"{path}: data needs train (and val while train.val_batches > 0)")
    return TrainConfig(model=model, train=train, data=data, doc=doc)


def write(path, doc):
    """Writes a config mapping as YAML (a derived config: another val_batches, absolute data
    paths)."""
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh, default_flow_style=None, sort_keys=False)
