"""The work one iteration of each bench/ops case must do: the one place both sides' counts
come from (bench/ops/torch_ops_bench.py and bench/ops/run; `kiln ops-bench` implements the
same formulas, and bench/ops/run checks Kiln's reported counts against these).

Invariants: counts are exact integers (the causal halving of an even count); an op counted
in flops has bytes 0 and vice versa; a shape has every key of its op exactly once, each in
1..SHAPE_VALUE_MAX. Shape syntax is `kiln ops-bench`'s: "K=V,K=V,..." with decimal integers.
"""

# Each op's shape keys, in the order `kiln ops-bench` takes them.
SHAPE_KEYS = {
    "matmul": ("M", "N", "K"),
    "attention": ("B", "H", "T", "D"),
    "layernorm": ("N", "C"),
    "gelu": ("N",),
    "cross_entropy": ("N", "V"),
    "adamw": ("N",),
}
PASSES = ("fwd", "fwdbwd")
# Input dtypes (`kiln ops-bench --dtype`): f32 everywhere; bf16 for the ops below only. A bf16
# case has the f32 case's counts (the same work, in another number format).
DTYPES = ("f32", "bf16")
BF16_OPS = ("matmul", "attention")
SHAPE_VALUE_MAX = 1 << 40  # far beyond any tensor this machine can hold

# matmul y = x @ w^T + b: forward 2MNK; backward dx and dw are 2MNK each (db is O(MN)).
MATMUL_FWD_FLOPS_PER_MNK = 2
MATMUL_FWDBWD_FLOPS_PER_MNK = 6
# FlashAttention-2's benchmark counts: forward 4*B*H*T^2*D (QK^T and PV, 2 flops per
# multiply-add), backward 2.5x the forward (five matmuls to the forward's two), so a
# forward+backward is 3.5x; causal halves all of them.
ATTENTION_FWD_FLOPS_PER_BHTTD = 4
ATTENTION_FWDBWD_TIMES_2 = 7  # 3.5x, kept integral: flops = fwd * 7 / 2
# Bytes of f32 traffic per element (4 bytes per tensor read or written once):
LAYERNORM_FWD_BYTES = 8  # read x, write y
LAYERNORM_BWD_BYTES = 12  # read dy and x, write dx
GELU_FWD_BYTES = 8  # read x, write y
GELU_BWD_BYTES = 12  # read dy and x, write dx
CROSS_ENTROPY_FWD_BYTES = 4  # read the logits
CROSS_ENTROPY_BWD_BYTES = 8  # read the logits again, write dlogits
ADAMW_STEP_BYTES = 28  # read p, g, m, v; write p, m, v


class ShapeError(ValueError):
    pass


def parse_shape(op, text):
    """'B=1,H=12,T=1024,D=64' -> {'B': 1, 'H': 12, ...}; raises ShapeError."""
    if op not in SHAPE_KEYS:
        raise ShapeError(f"unknown op '{op}'")
    shape = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value.isdigit():
            raise ShapeError(f"--shape: '{item}' is not KEY=INTEGER")
        if key in shape:
            raise ShapeError(f"--shape: '{key}' given twice")
        n = int(value)
        if not 1 <= n <= SHAPE_VALUE_MAX:
            raise ShapeError(f"--shape: {key}={n} is not in 1..{SHAPE_VALUE_MAX}")
        shape[key] = n
    want = SHAPE_KEYS[op]
    if set(shape) != set(want):
        raise ShapeError(f"--shape for {op} needs exactly {','.join(want)}; got '{text}'")
    return shape


def format_shape(op, shape):
    """{'M': 2048, ...} -> 'M=2048,N=768,K=768', keys in the op's order."""
    return ",".join(f"{k}={shape[k]}" for k in SHAPE_KEYS[op])


def counts(op, shape, pass_, causal=False):
    """(flops, bytes) that one iteration of the pass must compute / move. adamw has one pass
    (a step), whatever pass_ says."""
    s = shape
    if pass_ not in PASSES:
        raise ShapeError(f"unknown pass '{pass_}'")
    fwd = pass_ == "fwd"
    if op == "matmul":
        mnk = s["M"] * s["N"] * s["K"]
        return (MATMUL_FWD_FLOPS_PER_MNK if fwd else MATMUL_FWDBWD_FLOPS_PER_MNK) * mnk, 0
    if op == "attention":
        flops = ATTENTION_FWD_FLOPS_PER_BHTTD * s["B"] * s["H"] * s["T"] * s["T"] * s["D"]
        if not fwd:
            flops = flops * ATTENTION_FWDBWD_TIMES_2 // 2
        return (flops // 2 if causal else flops), 0
    if op == "layernorm":
        nc = s["N"] * s["C"]
        return 0, nc * (LAYERNORM_FWD_BYTES if fwd else LAYERNORM_FWD_BYTES + LAYERNORM_BWD_BYTES)
    if op == "gelu":
        return 0, s["N"] * (GELU_FWD_BYTES if fwd else GELU_FWD_BYTES + GELU_BWD_BYTES)
    if op == "cross_entropy":
        nv = s["N"] * s["V"]
        return 0, nv * (CROSS_ENTROPY_FWD_BYTES if fwd
                        else CROSS_ENTROPY_FWD_BYTES + CROSS_ENTROPY_BWD_BYTES)
    if op == "adamw":
        return 0, ADAMW_STEP_BYTES * s["N"]
    raise ShapeError(f"unknown op '{op}'")
