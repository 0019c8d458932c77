#!/usr/bin/env python3
"""PyTorch's side of bench/ops: times the torch equivalent of one `kiln ops-bench` case.

  /usr/bin/python3 bench/ops/torch_ops_bench.py --op OP --shape K=V,... [--causal]
      [--pass fwd|fwdbwd] [--dtype f32|bf16] --threads T [--iters N] [--warmup N] --json

Same flags and shape syntax as `kiln ops-bench`, and the same JSON fields on one line:
{"op","shape","pass","threads","isa":"torch","dtype","iters","ms","flops","gflops","bytes",
"gbps"},
plus what the driver needs to trust the figure: "torch" (version), "blas" (the libopenblas file
this process mapped, read from /proc/self/maps), "blas_threading" (openmp or pthread, from
that file's directory), "tcmalloc" (whether libtcmalloc is mapped), "torch_threads" and
"rss_setup_kib" (peak RSS once inputs exist, before the first timed pass).

Invariants:
- ms is the median over --iters of one pass, timed with perf_counter around the pass only.
  Inputs, gradient tensors and the optimizer state are created before the warmup; resetting
  .grad to None (what zero_grad(set_to_none=True) does) happens outside the timed region.
- flops and bytes come from bench/ops/op_counts.py, the formulas `kiln ops-bench` implements
  and bench/ops/run checks, so every column compares like with like.
- "fwd" runs the forward as training runs it: inputs require grad and autograd records the
  graph (as FlashAttention-2's benchmarks time it); "fwdbwd" adds backward with a fixed
  upstream gradient. adamw has one pass, one optimizer step, and reports "step".
- --dtype bf16 (matmul and attention only, as `kiln ops-bench`): every tensor is bfloat16 (the
  bf16 rounding of the f32 case's random values), outputs and gradients included, since torch's
  ops return their inputs' dtype. matmul is F.linear on bf16 x, w, b; attention is the explicit
  math path (q @ k^T * scale, masked_fill for causal, softmax, @ v) on bf16 (B, H, T, D)
  tensors, backward by autograd. The counts are the f32 case's.
Exit status: 0 on success, 2 on bad flags, 1 when the op could not run.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # op_counts.py sits beside
from op_counts import (BF16_OPS, DTYPES, PASSES, SHAPE_KEYS, ShapeError, counts,  # noqa: E402
                       parse_shape)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from torch_env import blas_facts  # noqa: E402

# Bounds on flags: more iterations than any sane run, more threads than any host here has.
ITERS_MAX = 100000
THREADS_MAX = 256
# The optimizer of the adamw case (the GPT-2 training recipe of DESIGN.md).
ADAMW_LR = 3e-4
ADAMW_BETAS = (0.9, 0.95)
ADAMW_WEIGHT_DECAY = 0.1
LAYERNORM_EPS = 1e-5  # F.layer_norm's default, and GPT-2's
SEED = 1234  # fixed inputs, so reruns time the same numbers
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def causal_mask(t):
    """(T, T) bool, True above the diagonal: the scores a causal query must not see."""
    return torch.ones(t, t, dtype=torch.bool).triu(1)


def math_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(D), masked) v on (B, H, T, D) tensors, written out as nanoGPT's CPU
    path writes it; every op runs in the inputs' dtype. mask: causal_mask(T) or None."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, T)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def make_case(op, shape, pass_, causal, dtype="f32"):
    """Builds the inputs and returns (run, reset): run() is one timed pass, reset() the untimed
    work between passes (dropping last pass's gradients). dtype bf16 (matmul, attention): every
    tensor in bfloat16."""
    g = torch.Generator().manual_seed(SEED)
    tdtype = TORCH_DTYPES[dtype]

    def randn(*size, grad=True):
        x = torch.randn(*size, generator=g, dtype=torch.float32)
        return x.to(tdtype).requires_grad_(grad)

    leaves = []
    if op == "matmul":
        x = randn(shape["M"], shape["K"])  # (M, K)
        w = randn(shape["N"], shape["K"])  # (N, K), y = x @ w^T + b as nn.Linear stores it
        b = randn(shape["N"])  # (N)
        dy = randn(shape["M"], shape["N"], grad=False)
        leaves = [x, w, b]
        fwd = lambda: F.linear(x, w, b)  # noqa: E731
    elif op == "attention":
        size = (shape["B"], shape["H"], shape["T"], shape["D"])
        q, k, v = randn(*size), randn(*size), randn(*size)  # (B, H, T, D) each
        dy = randn(*size, grad=False)
        leaves = [q, k, v]
        if dtype == "bf16":
            # The math path written out on bf16 tensors; the mask is built once, untimed, as
            # a model keeps it (nanoGPT's registered buffer).
            mask = causal_mask(shape["T"]) if causal else None
            fwd = lambda: math_attention(q, k, v, mask)  # noqa: E731
        else:
            # PyTorch 1.13's private entry point (public as scaled_dot_product_attention in
            # 2.0). On CPU 1.13 has no fused kernel behind it: it is the unfused math path
            # (q k^T, mask, softmax, times v, every intermediate materialised). It returns
            # (output, weights) and, with is_causal, builds the mask itself.
            fwd = lambda: F._scaled_dot_product_attention(  # noqa: E731
                q, k, v, is_causal=causal)[0]
    elif op == "layernorm":
        x = randn(shape["N"], shape["C"])  # (N, C)
        weight, bias = randn(shape["C"]), randn(shape["C"])  # (C) each
        dy = randn(shape["N"], shape["C"], grad=False)
        leaves = [x, weight, bias]
        fwd = lambda: F.layer_norm(x, (shape["C"],), weight, bias, LAYERNORM_EPS)  # noqa: E731
    elif op == "gelu":
        x = randn(shape["N"])  # (N)
        dy = randn(shape["N"], grad=False)
        leaves = [x]
        fwd = lambda: F.gelu(x, approximate="tanh")  # noqa: E731
    elif op == "cross_entropy":
        logits = randn(shape["N"], shape["V"])  # (N, V)
        targets = torch.randint(0, shape["V"], (shape["N"],), generator=g)  # (N)
        dy = None  # the loss is a scalar: backward() seeds it with 1
        leaves = [logits]
        fwd = lambda: F.cross_entropy(logits, targets)  # noqa: E731
    elif op == "adamw":
        param = torch.nn.Parameter(torch.randn(shape["N"], generator=g))  # (N)
        param.grad = torch.randn(shape["N"], generator=g)  # (N), fixed across steps
        opt = torch.optim.AdamW([param], lr=ADAMW_LR, betas=ADAMW_BETAS,
                                weight_decay=ADAMW_WEIGHT_DECAY, foreach=True)
        # The moments exist from the first step on; a first step here keeps their allocation
        # out of every timed step, warmup or not.
        opt.step()
        return opt.step, lambda: None
    else:
        raise ShapeError(f"unknown op {op}")

    def reset():
        for leaf in leaves:
            leaf.grad = None

    if pass_ == "fwd":
        return fwd, reset

    def fwdbwd():
        out = fwd()
        if dy is None:
            out.backward()
        else:
            out.backward(dy)

    return fwdbwd, reset


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", required=True, choices=sorted(SHAPE_KEYS))
    p.add_argument("--shape", required=True)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--pass", dest="pass_", choices=PASSES, default="fwd")
    p.add_argument("--dtype", choices=DTYPES, default="f32",
                   help="the tensors' dtype: f32, or bf16 (" + ", ".join(BF16_OPS) + " only)")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not 1 <= args.threads <= THREADS_MAX:
        p.error(f"--threads {args.threads} is not in 1..{THREADS_MAX}")
    if not 1 <= args.iters <= ITERS_MAX:
        p.error(f"--iters {args.iters} is not in 1..{ITERS_MAX}")
    if not 0 <= args.warmup <= ITERS_MAX:
        p.error(f"--warmup {args.warmup} is not in 0..{ITERS_MAX}")
    if args.causal and args.op != "attention":
        p.error("--causal applies to --op attention only")
    if args.dtype != "f32" and args.op not in BF16_OPS:
        p.error(f"--dtype {args.dtype} applies to --op {' and '.join(BF16_OPS)} only")
    try:
        args.shape_dict = parse_shape(args.op, args.shape)
    except ShapeError as e:
        p.error(str(e))
    return args


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    pass_ = "step" if args.op == "adamw" else args.pass_
    flops, nbytes = counts(args.op, args.shape_dict, args.pass_, args.causal)
    try:
        run, reset = make_case(args.op, args.shape_dict, args.pass_, args.causal, args.dtype)
        rss_setup_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(args.warmup):
            reset()
            run()
        samples_ms = []
        for _ in range(args.iters):
            reset()
            start = time.perf_counter()
            run()
            samples_ms.append((time.perf_counter() - start) * 1e3)
    except (RuntimeError, MemoryError) as e:
        print(f"torch_ops_bench: {args.op} {args.shape}: {e}", file=sys.stderr)
        return 1
    ms = statistics.median(samples_ms)
    facts = blas_facts()
    result = {
        "op": args.op, "shape": args.shape, "pass": pass_, "causal": args.causal,
        "threads": args.threads, "isa": "torch", "dtype": args.dtype, "iters": args.iters,
        "ms": ms,
        "flops": flops, "gflops": flops / ms / 1e6, "bytes": nbytes, "gbps": nbytes / ms / 1e6,
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        **facts,
        "rss_setup_kib": rss_setup_kib,
    }
    if args.json:
        print(json.dumps(result), flush=True)
    else:
        figure = (f"{result['gflops']:.1f} GFLOP/s" if flops else f"{result['gbps']:.2f} GB/s")
        dtype = "" if args.dtype == "f32" else f" {args.dtype}"
        print(f"torch {args.op} {args.shape} {pass_}{dtype}: {ms:.3f} ms, {figure} "
              f"({args.threads} threads, median of {args.iters}; blas {facts['blas']} "
              f"[{facts['blas_threading']}], tcmalloc {'yes' if facts['tcmalloc'] else 'no'})",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
