#!/usr/bin/env python3
"""PyTorch's side of `kiln train`: the same model, data order, optimizer and schedule, with the
same flags and the same JSON lines, so bench/train/run can put the two side by side.

  /usr/bin/python3 bench/train/torch_train.py CONFIG.yaml [--max-steps N] [--batch B]
      [--seq T] [--threads T] [--seed S] [--grad-accum K] [--val-every N] [--init FILE]
      [--peak-gflops X] [--attention sdpa|manual] [--precision fp32|bf16] [--json]

- Model: bench/train/gpt2_torch.py, float32. --init loads a Kiln safetensors file (e.g. from
  `kiln export CONFIG --seed S`, so both sides start from the same weights); without it the
  weights are drawn from the contract's distribution with torch's generator (enough for timing).
- Data: bench/lib/kiln_data.py reads the config's shard directories (relative to the working
  directory, as Kiln's) and visits the training windows in Kiln's order for the seed; the
  validation loss is the mean over val_batches unshuffled batches from the start of data.val,
  every val_every steps and at the last step, as the trainer's (include/kiln/train/trainer.h).
- A step (timed with perf_counter, validation excluded, as Kiln's step_ms): zero_grad; for each
  of grad_accum micro-batches: next batch, forward, backward of loss / grad_accum; global
  gradient norm and clipping; the schedule's lr; AdamW (foreach) with decay on 2-D weights.
- "As an expert runs it": torch.set_num_threads(--threads), PyTorch's own causal attention
  (F.scaled_dot_product_attention; PyTorch 1.13's private _scaled_dot_product_attention, which
  on CPU is PyTorch 1.13 unfused math attention: there is no fused CPU kernel behind it),
  zero_grad(set_to_none=True), foreach AdamW; the environment (tcmalloc, the OpenMP OpenBLAS,
  OMP_NUM_THREADS) is the driver's to set.
- --precision bf16: PyTorch's CPU mixed precision as users run it. The model, its gradients and
  AdamW's state stay float32; each forward and its loss (training and validation) run under
  torch.autocast("cpu", dtype=torch.bfloat16), which runs the matrix products (Linear, the
  attention's matmuls) in bfloat16 and the ops on its float32 list in float32; the backward
  and the optimizer step run outside it. fp32 (the default): no autocast.

Output (--json): one line per step {"step","loss","lr","grad_norm","tokens_per_s","step_ms",
"mfu"} (+ "val_loss"), then {"event":"done","steps","train_loss","val_loss","tokens_per_s"
(over the steps after the first),"peak_rss_bytes"} plus what the driver checks: "torch",
"torch_threads", "blas", "blas_threading", "tcmalloc", "flops_per_token", "num_params",
"attention", "precision". mfu is null without --peak-gflops. Without --json: a line per step.
Exit status: 0 on success, 2 on bad flags or config, 1 when training failed.
"""
import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import gpt2_torch  # noqa: E402
import kiln_data  # noqa: E402
import train_config  # noqa: E402
from torch_env import blas_facts  # noqa: E402

KIB = 1024
# The flags that override a `train:` key of the config, as `kiln train`'s.
OVERRIDES = ("max-steps", "batch", "seq", "threads", "seed", "grad-accum", "val-every")
PRECISIONS = ("fp32", "bf16")  # kiln train --precision's


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    for flag in OVERRIDES:
        key = flag.replace("-", "_")
        p.add_argument(f"--{flag}", type=int, default=None, dest=key, help=f"train.{key}")
    p.add_argument("--init", help="start from this Kiln safetensors file (kiln export)")
    p.add_argument("--peak-gflops", type=float, default=0.0,
                   help="the machine's peak for MFU (default: no MFU)")
    p.add_argument("--attention", choices=sorted(gpt2_torch.ATTENTION),
                   default=gpt2_torch.DEFAULT_ATTENTION)
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32, or bf16: the forward and the loss under CPU autocast to bfloat16 "
                        "(float32 weights, gradients and optimizer state)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.peak_gflops < 0 or not math.isfinite(args.peak_gflops):
        p.error("--peak-gflops must be a finite number >= 0")
    overrides = {key: getattr(args, key) for key in (f.replace("-", "_") for f in OVERRIDES)}
    try:
        config = train_config.load(args.config, overrides)
    except train_config.ConfigError as e:
        p.error(str(e))
    args.model, args.train, args.data = config.model, config.train, config.data
    return args


def autocast(precision):
    """The context a forward and its loss run in: CPU autocast to bfloat16 for bf16, nothing
    for fp32."""
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def validation_loss(model, loader, batches, precision):
    loader.rewind()
    total = 0.0
    model.eval()
    with torch.no_grad():
        for _ in range(batches):
            inputs, targets = loader.next()
            with autocast(precision):
                _, loss = model(torch.from_numpy(inputs), torch.from_numpy(targets))
            total += loss.item()
    model.train()
    return total / batches


def validates_at(train, step):
    if train["val_batches"] == 0:
        return False
    return step == train["max_steps"] or (train["val_every"] > 0 and
                                          step % train["val_every"] == 0)


def emit(args, line, text):
    if args.json:
        print(json.dumps(line), flush=True)
    else:
        print(text, flush=True)


def train(args):
    cfg, h = args.model, args.train
    torch.set_num_threads(h["threads"])
    if args.init:
        model = gpt2_torch.load_kiln_weights(args.init, attention=args.attention)
        if model.config != cfg:
            raise ValueError(f"{args.init} holds {model.config}, the config says {cfg}")
    else:
        model = gpt2_torch.Gpt2(cfg, attention=args.attention)
        model.init_weights(h["seed"])
    hyper = gpt2_torch.Hyper(lr=h["lr"], min_lr=h["min_lr"], warmup_steps=h["warmup_steps"],
                             max_steps=h["max_steps"], weight_decay=h["weight_decay"],
                             beta1=h["beta1"], beta2=h["beta2"], eps=h["eps"],
                             grad_clip=h["grad_clip"])
    optimizer = gpt2_torch.make_optimizer(model, hyper)
    train_loader = kiln_data.Loader(kiln_data.read_stream(args.data["train"]), h["batch"],
                                    h["seq"], h["seed"])
    val_loader = None
    if h["val_batches"] > 0:
        val_loader = kiln_data.Loader(kiln_data.read_stream(args.data["val"]), h["batch"],
                                      h["seq"], h["seed"], shuffle=False)
    tokens_per_step = h["batch"] * h["seq"] * h["grad_accum"]
    flops_per_token = cfg.flops_per_token(h["seq"])
    later_s = first_s = 0.0
    loss = val = float("nan")
    for step in range(1, h["max_steps"] + 1):
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(h["grad_accum"]):
            inputs, targets = train_loader.next()
            with autocast(args.precision):
                _, micro = model(torch.from_numpy(inputs), torch.from_numpy(targets))
            (micro / h["grad_accum"]).backward()  # outside autocast, as its documentation says
            loss_sum += micro.item()
        grad_norm, lr = gpt2_torch.clip_and_step(model, optimizer, hyper, step)
        step_s = max(time.perf_counter() - t0, 1e-9)
        if step == 1:
            first_s = step_s
        else:
            later_s += step_s
        loss = loss_sum / h["grad_accum"]
        tokens_per_s = tokens_per_step / step_s
        mfu = flops_per_token * tokens_per_s / (args.peak_gflops * 1e9) \
            if args.peak_gflops > 0 else None
        line = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                "tokens_per_s": tokens_per_s, "step_ms": step_s * 1e3, "mfu": mfu}
        text = (f"step {step}/{h['max_steps']} | loss {loss:.4f} | lr {lr:.3g} | "
                f"{tokens_per_s:.0f} tok/s | {step_s * 1e3:.0f} ms/step")
        if validates_at(h, step):
            val = validation_loss(model, val_loader, h["val_batches"], args.precision)
            line["val_loss"] = val
            text += f" | val {val:.4f}"
        emit(args, line, text)
        if not math.isfinite(loss):
            print(f"torch_train: step {step}: training loss is {loss}: the run diverged",
                  file=sys.stderr)
            return 1
    steps = h["max_steps"]
    mean_rate = tokens_per_step * (steps - 1) / later_s if steps > 1 else \
        tokens_per_step / first_s
    done = {"event": "done", "steps": steps, "train_loss": loss,
            "val_loss": val if math.isfinite(val) else None, "tokens_per_s": mean_rate,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KIB,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "flops_per_token": flops_per_token, "num_params": cfg.num_params,
            "attention": args.attention, "precision": args.precision, **blas_facts()}
    emit(args, done, f"done: {steps} steps, train loss {loss:.4f}, val loss {val:.4f}, "
         f"{mean_rate:.0f} tok/s, peak RSS {done['peak_rss_bytes'] / 2**20:.0f} MiB")
    return 0


def main(argv):
    args = parse_args(argv)
    try:
        return train(args)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"torch_train: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
