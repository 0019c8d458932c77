#!/usr/bin/env python3
"""Golden parity: `kiln train` against an independent PyTorch GPT-2, as llm.c's test_gpt2.

  KILN_BIN=build/x/bin/kiln /usr/bin/python3 tests/train/golden_parity.py [--keep DIR]

Runs `kiln train` on a small config written to a temporary folder (tiny's architecture,
6 layers / 6 heads / 384 wide, on the real SOTU shards in data/sotu/, batch 2, seq 64, 10 steps,
grad_accum 1, --threads 2, --debug-dump DIR, --json), then in PyTorch
(bench/train/gpt2_torch.py), in float64 (the reference) and float32:
  1. the data: bench/lib/kiln_data.py's re-implementation of the loader order yields exactly
     the 10 batches Kiln recorded (what bench/train/run --learning relies on);
  2. step 1: builds the model from DIR/weights0.safetensors, runs step 1's batch and compares
     Kiln's logits, loss and every parameter's gradient (before clipping) with the reference;
     also Kiln's gradient norm and every step's learning rate (its JSON lines);
  3. 10 AdamW steps (the contract's schedule, weight decay on 2-D weights, clipping to 1.0,
     betas, eps) on the recorded batches: every step's loss against Kiln's, within 1e-4
     relative.
Error measure, per tensor: max|a - b| / (max|b| + 1e-30), b the float64 reference ("rel to
max"). Every tolerance is a few times the error measured on this machine, written beside it.
Prints a table; exits 1 when a check fails (2 for bad arguments), and FAILS (not skips) with
"run scripts/fetch-data" when the shards are missing.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.environ.get("KILN_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
sys.path.insert(0, os.path.join(ROOT, "bench", "lib"))
import gpt2_torch  # noqa: E402
import kiln_data  # noqa: E402

TRAIN_DIR = os.path.join(ROOT, "data", "sotu", "train")
VAL_DIR = os.path.join(ROOT, "data", "sotu", "val")
STEPS = 10
BATCH, SEQ = 2, 64
THREADS = 2
SEED = 1337
KILN_TIMEOUT_S = 240  # 10 small steps take about 3 s; four minutes is "hung"
TINY = 1e-30  # keeps the measure finite for an all-zero reference

# warmup 3 of 10 steps, so that both the warmup and the cosine are exercised; the rest is
# configs/tiny.yaml's. One validation batch at the last step keeps that path in the run.
CONFIG = f"""\
model: {{n_layer: 6, n_head: 6, n_embd: 384, block_size: 256, vocab_size: 50257}}
data: {{train: {TRAIN_DIR}, val: {VAL_DIR}}}
train: {{batch: {BATCH}, seq: {SEQ}, grad_accum: 1, max_steps: {STEPS}, lr: 0.0006,
        min_lr: 0.00006, warmup_steps: 3, weight_decay: 0.1, beta1: 0.9, beta2: 0.95,
        eps: 1.0e-8, grad_clip: 1.0, val_every: 0, val_batches: 1, seed: {SEED},
        threads: {THREADS}}}
"""

# Tolerances on max|kiln - ref64| / max|ref64| per tensor kind (relative error for scalars).
# Measured on this machine (AMD EPYC, seed 1337, 2 threads), the largest over Kiln's three ISA
# paths (KILN_OPS_ISA=avx512, avx2, scalar) in the comments, with torch float32's own error
# against the same reference beside it: both are float32 rounding. Each tolerance is 5-10x the
# larger of the two, so any sound float32 implementation passes and a real bug (a wrong
# scale, a missed term, a transposed weight: errors of 1e-3 and up) cannot. llm.c's
# test_gpt2 allows 1e-2 (logits) and 2e-2 (gradients); the brief's loss bound is 1e-4.
TOLERANCES = {
    "logits": 5e-6,      # kiln 7.9e-7, torch fp32 7.3e-7
    "loss": 5e-7,        # kiln 3.6e-8, torch fp32 3.6e-8 (an fp32 ulp of 10.9 is 9.8e-8 rel.)
    "grad_norm": 3e-7,   # kiln 2.8e-8 (Kiln sums the squares in double)
    "lr": 1e-12,         # both sides compute it in double: kiln 0
    "wte": 5e-6,         # kiln 6.1e-7, torch fp32 5.6e-7 (embedding and tied-head terms)
    "wpe": 5e-6,         # kiln 6.9e-7, torch fp32 5.2e-7
    "ln": 5e-6,          # LayerNorm weights and biases: kiln 9.0e-7, torch fp32 7.3e-7
    "linear": 5e-6,      # Linear weights and biases: kiln 9.5e-7, torch fp32 7.6e-7
    "train_loss": 1e-5,  # worst of the 10 steps: kiln 4.3e-8, torch fp32 1.6e-6
}


def tolerance_key(name):
    if name in ("wte.weight", "wpe.weight"):
        return name.split(".")[0]
    if ".ln_" in name or name.startswith("ln_f"):
        return "ln"
    return "linear"


def rel_max(a, b):
    """max|a - b| / (max|b| + TINY), in float64."""
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max() / (b.abs().max() + TINY))


def rel(a, b):
    return abs(a - b) / (abs(b) + TINY)


class Table:
    def __init__(self):
        self.rows, self.failures = [], []

    def check(self, what, err, tol, torch32=None, note=""):
        ok = err <= tol and math.isfinite(err)
        self.rows.append((what, err, torch32, tol, ok, note))
        if not ok:
            self.failures.append(f"{what}: error {err:.3g} above its tolerance {tol:.3g}")

    def fail(self, what):
        self.failures.append(what)
        self.rows.append((what, None, None, None, False, ""))

    def print(self):
        print("| check | kiln vs float64 | torch float32 vs float64 | tolerance | ok | note |")
        print("|---|---|---|---|---|---|")
        for what, err, t32, tol, ok, note in self.rows:
            cells = [what, "-" if err is None else f"{err:.2e}",
                     "-" if t32 is None else f"{t32:.2e}",
                     "-" if tol is None else f"{tol:.0e}", "ok" if ok else "FAIL", note]
            print("| " + " | ".join(cells) + " |")


def run_kiln(kiln, workdir):
    config = os.path.join(workdir, "parity.yaml")
    with open(config, "w", encoding="utf-8") as fh:
        fh.write(CONFIG)
    dump = os.path.join(workdir, "dump")
    argv = [kiln, "train", config, "--threads", str(THREADS), "--debug-dump", dump, "--json"]
    print("$ " + " ".join(argv), flush=True)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=KILN_TIMEOUT_S, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"kiln train exited {r.returncode}:\n{r.stderr[-3000:]}")
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    steps = [x for x in lines if "step" in x and "event" not in x]
    if len(steps) != STEPS:
        raise RuntimeError(f"kiln train printed {len(steps)} step lines, not {STEPS}:\n"
                           f"{r.stdout[-2000:]}")
    return dump, steps


def hyper():
    return gpt2_torch.Hyper(lr=6e-4, min_lr=6e-5, warmup_steps=3, max_steps=STEPS,
                            weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0)


def step_one(weights, dtype, inputs, targets):
    """(model, logits, loss, {name: grad}) of step 1's forward and backward in dtype. float64
    uses the written-out attention (the reference), float32 the fused one (what the benchmark
    runs)."""
    attention = "manual" if dtype == torch.float64 else gpt2_torch.DEFAULT_ATTENTION
    model = gpt2_torch.load_kiln_weights(weights, dtype=dtype, attention=attention)
    logits, loss = model(inputs, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return model, logits.detach(), float(loss), grads


def train_losses(weights, dtype, batches):
    """The loss of each of the recorded batches over 10 steps of the contract's training."""
    attention = "manual" if dtype == torch.float64 else gpt2_torch.DEFAULT_ATTENTION
    model = gpt2_torch.load_kiln_weights(weights, dtype=dtype, attention=attention)
    h = hyper()
    optimizer = gpt2_torch.make_optimizer(model, h)
    losses = []
    for step, (inputs, targets) in enumerate(batches, start=1):
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(inputs, targets)
        loss.backward()
        gpt2_torch.clip_and_step(model, optimizer, h, step)
        losses.append(float(loss))
    return losses


def compare(kiln, workdir):
    table = Table()
    dump, steps = run_kiln(kiln, workdir)
    weights = os.path.join(dump, "weights0.safetensors")
    rec, _ = gpt2_torch.read_safetensors(os.path.join(dump, "steps.safetensors"))
    inputs = rec["inputs"].to(torch.int64)  # (S, B, T)
    targets = rec["targets"].to(torch.int64)
    if tuple(inputs.shape) != (STEPS, BATCH, SEQ):
        table.fail(f"dump inputs have shape {list(inputs.shape)}, not {[STEPS, BATCH, SEQ]}")
        return table

    # 1. The data order, re-implemented in Python.
    loader = kiln_data.Loader(kiln_data.read_stream(TRAIN_DIR), BATCH, SEQ, SEED)
    mismatched = []
    for s in range(STEPS):
        x, y = loader.next()
        if not (np.array_equal(x, inputs[s].numpy()) and np.array_equal(y, targets[s].numpy())):
            mismatched.append(s + 1)
    if mismatched:
        table.fail(f"bench/lib/kiln_data.py's batches differ from Kiln's at steps {mismatched}")
    else:
        table.rows.append((f"data order: {STEPS} batches equal Kiln's", 0.0, None, 0.0, True,
                           "exact"))

    # 2. Step 1: logits, loss, gradients, gradient norm, learning rates.
    ref_model, ref_logits, ref_loss, ref_grads = step_one(weights, torch.float64, inputs[0],
                                                          targets[0])
    _, t32_logits, t32_loss, t32_grads = step_one(weights, torch.float32, inputs[0], targets[0])
    if tuple(rec["logits"].shape) != tuple(ref_logits.shape):
        table.fail(f"dump logits have shape {list(rec['logits'].shape)}, the model's "
                   f"{list(ref_logits.shape)}")
    else:
        table.check("logits (B, T, V) step 1", rel_max(rec["logits"], ref_logits),
                    TOLERANCES["logits"], rel_max(t32_logits, ref_logits), "rel to max")
    table.check("loss step 1", rel(float(rec["losses"][0]), ref_loss), TOLERANCES["loss"],
                rel(t32_loss, ref_loss), f"kiln {float(rec['losses'][0]):.6f}, "
                f"ref {ref_loss:.6f}; relative")
    ref_norm = math.sqrt(sum(float((g * g).sum()) for g in ref_grads.values()))
    table.check("grad norm step 1 (before clipping)", rel(steps[0]["grad_norm"], ref_norm),
                TOLERANCES["grad_norm"], None, f"kiln {steps[0]['grad_norm']:.6f}, "
                f"ref {ref_norm:.6f}; relative")
    h = hyper()
    lr_err = max(rel(line["lr"], gpt2_torch.learning_rate(h, line["step"])) for line in steps)
    table.check(f"lr, steps 1-{STEPS}", lr_err, TOLERANCES["lr"], None, "relative")
    worst = {}
    for name, _ in ref_model.named_parameters():
        key = f"grad.{name}"
        if key not in rec:
            table.fail(f"the dump has no {key}")
            continue
        if tuple(rec[key].shape) != tuple(ref_grads[name].shape):
            table.fail(f"{key} has shape {list(rec[key].shape)}, the model's "
                       f"{list(ref_grads[name].shape)}")
            continue
        err = rel_max(rec[key], ref_grads[name])
        t32 = rel_max(t32_grads[name], ref_grads[name])
        kind = tolerance_key(name)
        if kind not in worst or err > worst[kind][1]:
            worst[kind] = (name, err, t32)
        if err > TOLERANCES[kind]:
            table.check(f"grad {name}", err, TOLERANCES[kind], t32, "rel to max")
    for kind, (name, err, t32) in sorted(worst.items()):
        table.check(f"grads {kind}: worst is {name}", err, TOLERANCES[kind], t32,
                    "rel to max")

    # 3. Ten training steps on the recorded batches.
    batches = list(zip(inputs, targets))
    ref_losses = train_losses(weights, torch.float64, batches)
    t32_losses = train_losses(weights, torch.float32, batches)
    kiln_losses = [float(x) for x in rec["losses"]]
    json_losses = [line["loss"] for line in steps]
    # The JSON line prints the float loss in its shortest round-trip form: back to float32, it
    # is the dump's value exactly.
    if [float(np.float32(x)) for x in json_losses] != kiln_losses:
        table.fail("the JSON lines' losses differ from the dump's")
    err = max(rel(k, r) for k, r in zip(kiln_losses, ref_losses))
    t32 = max(rel(t, r) for t, r in zip(t32_losses, ref_losses))
    table.check(f"losses, steps 1-{STEPS} (AdamW, clipping, schedule)", err,
                TOLERANCES["train_loss"], t32,
                f"kiln {kiln_losses[0]:.4f} -> {kiln_losses[-1]:.4f}, ref {ref_losses[0]:.4f} "
                f"-> {ref_losses[-1]:.4f}; worst step, relative")
    return table


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", default=os.environ.get("KILN_BIN"),
                   help="the kiln binary (default $KILN_BIN)")
    p.add_argument("--keep", help="run in this folder and keep the dump (default: a temporary "
                                  "folder, removed)")
    args = p.parse_args(argv)
    if not args.kiln:
        p.error("no kiln binary: pass --kiln or set KILN_BIN")
    if not (os.path.isdir(TRAIN_DIR) and os.path.isdir(VAL_DIR)):
        print(f"FAIL: no token shards in {TRAIN_DIR} and {VAL_DIR}: run scripts/fetch-data",
              file=sys.stderr)
        return 1
    torch.set_num_threads(THREADS)
    try:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            table = compare(args.kiln, args.keep)
        else:
            with tempfile.TemporaryDirectory(prefix="kiln-golden-") as tmp:
                table = compare(args.kiln, tmp)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    table.print()
    if table.failures:
        print("\nFAILED:\n" + "\n".join(f"- {f}" for f in table.failures))
        return 1
    print(f"\nOK: {len(table.rows)} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
