#!/usr/bin/env python3
"""PyTorch's answers for src/ops/torch_parity_test.cc, in float64.

  torch_reference.py <dir>

Reads <dir>/manifest.json, which lists cases:

  {"cases": [{"name": "matmul", "op": "matmul", "params": {...},
              "inputs": {"x": {"file": "matmul.x.bin", "dtype": "f32", "shape": [67, 129]}, ...}},
             ...]}

Every input file is raw little-endian f32 or i32 in row-major order. For each case it computes
the forward and the backward with torch 1.13 in float64 (autograd for gradients; attention is
the explicit softmax(q k^T * scale + mask) v, not a fused kernel; RMSNorm is its formula in
torch ops, 1.13 having no RMSNorm; the gradient norm and the clipping factor come from
clip_grad_norm_; bf16 conversion is Tensor.to between float32 and bfloat16, the one case not in
float64), writes each output as raw little-endian f64 to <dir>/<case>.<output>.out.bin, and
lists them in <dir>/results.json:

  {"matmul": {"y": {"file": "matmul.y.out.bin", "shape": [67, 95]}, ...}, ...}

Exits 0 on success, 2 on bad usage or input, 3 when numpy or torch cannot be imported (the C++
test reports that as a missing dependency: python3-torch and python3-numpy are declared
dependencies, installed by scripts/install-deps).
"""
import json
import math
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # reported by the C++ test, which prints this line
    print(f"torch_reference.py: cannot import {e.name} with {sys.executable}: "
          "install python3-torch and python3-numpy (scripts/install-deps)", file=sys.stderr)
    sys.exit(3)

DTYPES = {"f32": "<f4", "i32": "<i4"}


def load(directory, spec):
    data = np.fromfile(os.path.join(directory, spec["file"]), dtype=DTYPES[spec["dtype"]])
    expected = math.prod(spec["shape"])
    if data.size != expected:
        raise ValueError(f"{spec['file']}: {data.size} elements, expected {expected}")
    data = data.reshape(spec["shape"])
    if spec["dtype"] == "i32":
        return torch.from_numpy(data.astype(np.int64))
    return torch.from_numpy(data.astype(np.float64))


def leaf(t):
    return t.clone().requires_grad_(True)


def matmul(t, p):
    x, w, bias = leaf(t["x"]), leaf(t["w"]), leaf(t["bias"])
    y = torch.nn.functional.linear(x, w, bias)
    y.backward(t["dy"])
    return {"y": y, "dx": x.grad, "dw": w.grad, "dbias": bias.grad}


def math_attention(q, k, v, p):
    """The explicit softmax(q k^T * scale + mask) v on (B, T, H, D) tensors, in their dtype:
    (o in (B, T, H, D), the scores' logsumexp in (B, H, T))."""
    qh, kh, vh = (a.permute(0, 2, 1, 3) for a in (q, k, v))
    D = q.shape[-1]
    T = q.shape[1]
    scale = p["scale"] if p["scale"] != 0 else 1.0 / math.sqrt(D)
    scores = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if p["causal"]:
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    o = torch.matmul(torch.softmax(scores, dim=-1), vh).permute(0, 2, 1, 3)
    return o, lse


def attention(t, p):
    q, k, v = (leaf(t[n]) for n in ("q", "k", "v"))
    o, lse = math_attention(q, k, v, p)
    o.backward(t["dout"])
    return {"o": o, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def attention_bf16(t, p):
    """The float64 answer on the (bf16-exact) inputs, and PyTorch's own bf16 computation of the
    same: the explicit math path (q k^T, mask, softmax, @ v) on bfloat16 tensors, by autograd,
    outputs prefixed torch_bf16_. The C++ test holds Kiln's bf16 error against the latter's."""
    exact = attention(t, p)
    half = {n: t[n].to(torch.bfloat16) for n in ("q", "k", "v", "dout")}
    q, k, v = (half[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
    o, _ = math_attention(q, k, v, p)
    o.backward(half["dout"])
    out = {name: value for name, value in exact.items() if name != "lse"}
    for name, value in (("o", o), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        out["torch_bf16_" + name] = value.to(torch.float64)
    return out


def layernorm(t, p):
    x, weight, bias = leaf(t["x"]), leaf(t["weight"]), leaf(t["bias"])
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, p["eps"])
    y.backward(t["dy"])
    with torch.no_grad():
        mean = x.mean(dim=-1)
        rstd = 1.0 / torch.sqrt(x.var(dim=-1, unbiased=False) + p["eps"])
    return {"y": y, "mean": mean, "rstd": rstd, "dx": x.grad, "dweight": weight.grad,
            "dbias": bias.grad}


def gelu(t, p):
    x = leaf(t["x"])
    y = torch.nn.functional.gelu(x, approximate="tanh")
    y.backward(t["dy"])
    return {"y": y, "dx": x.grad}


def cross_entropy(t, p):
    vocab = p["vocab"]
    logits = leaf(t["logits"])
    used = logits[:, :vocab]
    losses = torch.nn.functional.cross_entropy(used, t["targets"], reduction="none")
    with torch.no_grad():
        lse = torch.logsumexp(used, dim=-1)
    losses.backward(t["dlosses"])  # the padding columns get a zero gradient
    return {"losses": losses, "lse": lse, "dlogits": logits.grad}


def adamw(t, p):
    param = torch.nn.Parameter(t["params"].clone())
    opt = torch.optim.AdamW([param], lr=p["lr"], betas=(p["beta1"], p["beta2"]), eps=p["eps"],
                            weight_decay=p["weight_decay"])
    for step in range(p["steps"]):
        param.grad = t[f"grads{step}"].clone()
        opt.step()
    state = opt.state[param]
    return {"params": param.detach(), "m": state["exp_avg"], "v": state["exp_avg_sq"]}


def embedding(t, p):
    wte, wpe = leaf(t["wte"]), leaf(t["wpe"])
    tokens = t["tokens"]
    T = tokens.shape[1]
    y = torch.nn.functional.embedding(tokens, wte) + wpe[:T].unsqueeze(0)
    y.backward(t["dy"])
    return {"y": y, "dwte": wte.grad, "dwpe": wpe.grad}


def rmsnorm(t, p):
    # torch 1.13 has no RMSNorm (torch.nn.RMSNorm arrived in 2.4): the formula in torch ops,
    # differentiated by autograd.
    x, weight = leaf(t["x"]), leaf(t["weight"])
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + p["eps"])
    y = x * rstd * weight
    y.backward(t["dy"])
    return {"y": y, "rstd": rstd.squeeze(-1), "dx": x.grad, "dweight": weight.grad}


def residual(t, p):
    a, b = leaf(t["a"]), leaf(t["b"])
    y = a + b
    y.backward(t["dy"])
    # Kiln's backward accumulates into gradients that already hold da0 and db0.
    return {"y": y, "da": t["da0"] + a.grad, "db": t["db0"] + b.grad}


def grad_norm(t, p):
    results = {}
    for key, max_norm in zip(("clipping", "not_clipping"), p["max_norms"]):
        params = []
        for i in range(p["buffers"]):
            param = torch.nn.Parameter(torch.zeros_like(t[f"g{i}"]))
            param.grad = t[f"g{i}"].clone()
            params.append(param)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        results["norm"] = norm
        # The last buffer is one gradient of 1.0: after clipping it holds the factor applied.
        results[f"scale_{key}"] = params[-1].grad.reshape(1)
    results["norm"] = results["norm"].reshape(1)
    return results


def bf16(t, p):
    # The inputs arrive as float64 holding f32 values exactly: convert from f32, as Kiln does.
    to_bf16 = t["x"].to(torch.float32).to(torch.bfloat16)
    bits = torch.from_numpy(t["bits"].numpy().astype(np.uint16).view(np.int16))
    to_f32 = bits.view(torch.bfloat16).to(torch.float32)
    return {"to_bf16": to_bf16.to(torch.float64), "to_f32": to_f32.to(torch.float64)}


OPS = {"matmul": matmul, "attention": attention, "attention_bf16": attention_bf16, "layernorm": layernorm, "gelu": gelu,
       "cross_entropy": cross_entropy, "adamw": adamw, "embedding": embedding,
       "rmsnorm": rmsnorm, "residual": residual, "grad_norm": grad_norm, "bf16": bf16}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = sys.argv[1]
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    torch.set_default_dtype(torch.float64)
    results = {}
    for case in manifest["cases"]:
        if case["op"] not in OPS:
            print(f"torch_reference.py: case {case['name']}: unknown op {case['op']}",
                  file=sys.stderr)
            return 2
        tensors = {name: load(directory, spec) for name, spec in case["inputs"].items()}
        outputs = OPS[case["op"]](tensors, case.get("params", {}))
        results[case["name"]] = {}
        for name, value in outputs.items():
            array = value.detach().numpy().astype("<f8")
            file = f"{case['name']}.{name}.out.bin"
            array.tofile(os.path.join(directory, file))
            results[case["name"]][name] = {"file": file, "shape": list(array.shape)}
    print(f"torch {torch.__version__}: {len(results)} cases", file=sys.stderr)
    with open(os.path.join(directory, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
