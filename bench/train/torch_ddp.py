#!/usr/bin/env python3
"""PyTorch DDP's side of `kiln train --nproc N`: the same model, data, optimizer and schedule as
torch_train.py, data-parallel over N processes on this host with the gloo backend, printing
`kiln train --json`'s step fields so bench/train/run --ddp can put the two side by side.

  /usr/bin/python3 bench/train/torch_ddp.py CONFIG.yaml --nproc N [--max-steps S] [--batch B]
      [--seq T] [--threads T] [--seed S] [--peak-gflops X] [--json]

- The launcher (this file without --rank) picks a free TCP port on 127.0.0.1, starts N ranks
  (this file with --rank r --port P, the same interpreter and environment: the driver's
  tcmalloc, OpenMP OpenBLAS and OMP_NUM_THREADS reach every rank), waits for them with a
  deadline and kills the others when one fails. Only rank 0 prints to stdout.
- A rank: torch.set_num_threads(--threads); gloo's process group (every collective bounded by
  COLLECTIVE_TIMEOUT_S); torch_train.py's model (bench/train/gpt2_torch.py, torch's
  scaled_dot_product_attention, on CPU in 1.13 the unfused math attention, the config's seed,
  so every rank starts from the same weights; DDP broadcasts rank 0's anyway) in torch.nn.parallel.DistributedDataParallel with its defaults (25 MB buckets, the
  all-reduce overlapped with the backward); kiln_data.Loader(rank=r, world=N): rank r takes
  windows [p + r*B, p + r*B + B) of each global batch, as Kiln's loader. A step, timed on
  every rank with perf_counter: zero_grad(set_to_none), next batch, forward, backward (DDP
  averages the gradients), clipping, the schedule's lr, AdamW (foreach).
- The all-reduce cost, measured once after training, outside the steps: a separate
  dist.all_reduce (sum) of a float32 buffer with one element per parameter (120 MB for tiny),
  the median of ALLREDUCE_REPS after one warm-up, with nothing else running. It is what a step
  would pay if none of DDP's all-reduce were hidden behind the backward, an upper bound on the
  exposed part.
- The exposed all-reduce, measured the way Kiln's comm_exposed_ms means it (the time the
  all-reduce adds to a step): after training, EXPOSED_PAIRS pairs of steps, each pair one step
  as trained (DDP all-reduces during the backward) and one under ddp.no_sync() (no
  communication), every step after a barrier; exposed_allreduce_ms is the mean of the first
  minus the mean of the second. It is a difference of two step times on a shared machine, so
  it carries their noise (it can come out slightly negative when nothing is exposed).
- No validation: configs with val_batches > 0 are refused (the driver gives val_batches: 0;
  validation is not part of a step's time on either side).

Output (--json), rank 0: one line per step {"step","loss" (rank 0's micro-batch),"lr",
"grad_norm","tokens_per_s" (all ranks' tokens over rank 0's step time),"step_ms","mfu"
(against N x --peak-gflops, as Kiln's),"world"}, then {"event":"done","steps","train_loss",
"tokens_per_s" (steps after the first),"peak_rss_bytes" (rank 0's),"allreduce_ms",
"allreduce_bytes","exposed_allreduce_ms","step_ms_synced","step_ms_no_sync","world","backend"} plus torch_train.py's "torch","torch_threads",
"flops_per_token","num_params","attention" and the blas facts the driver checks.
Exit status: 0 on success, 2 on bad flags or config, 1 when a rank failed or hung.
"""
import argparse
import datetime
import json
import math
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import train_config  # noqa: E402

KIB = 1024
NPROC_MAX = 64  # processes on one host; more is a typo on a machine with a few cores
# Every gloo collective's deadline: a step takes seconds here, so two minutes means a rank
# died or hung, not that it is slow.
COLLECTIVE_TIMEOUT_S = 120
# The launcher's bound on the whole run, unless --timeout-s says otherwise: the driver kills
# the launcher's process group before this in practice (its --timeout-s, 600 s).
DEFAULT_RUN_TIMEOUT_S = 3600
POLL_S = 0.2  # how often the launcher looks at its ranks
KILL_GRACE_S = 2  # between SIGTERM and SIGKILL of the surviving ranks after a failure
ALLREDUCE_REPS = 3  # timed all-reduces after one warm-up: ~0.1-1 s each on this machine
# Pairs of (synchronised, no_sync) steps for the exposed all-reduce: a tiny step takes about 4 s
# on one thread, so two pairs add about 16 s to a run; more would lengthen every --ddp repeat.
EXPOSED_PAIRS = 2
RENDEZVOUS = "127.0.0.1"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--nproc", type=int, required=True, help="ranks on this host")
    for flag in ("max-steps", "batch", "seq", "threads", "seed"):
        p.add_argument(f"--{flag}", type=int, default=None, dest=flag.replace("-", "_"),
                       help=f"train.{flag.replace('-', '_')}")
    p.add_argument("--peak-gflops", type=float, default=0.0,
                   help="one rank's peak for MFU, as kiln train's (default: no MFU)")
    p.add_argument("--timeout-s", type=int, default=DEFAULT_RUN_TIMEOUT_S,
                   help="bound on the whole run (launcher)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not 1 <= args.nproc <= NPROC_MAX:
        p.error(f"--nproc {args.nproc} is not in 1..{NPROC_MAX}")
    if args.peak_gflops < 0 or not math.isfinite(args.peak_gflops):
        p.error("--peak-gflops must be a finite number >= 0")
    if args.timeout_s < 1:
        p.error("--timeout-s must be at least 1")
    if args.rank is not None and (not 0 <= args.rank < args.nproc or args.port is None):
        p.error(f"--rank {args.rank} needs --port and must be in 0..{args.nproc - 1}")
    overrides = {k: getattr(args, k) for k in ("max_steps", "batch", "seq", "threads", "seed")}
    try:
        config = train_config.load(args.config, overrides)
    except train_config.ConfigError as e:
        p.error(str(e))
    if config.train["grad_accum"] != 1:
        p.error("torch_ddp.py runs grad_accum 1 only (the benchmark's)")
    if config.train["val_batches"] != 0:
        p.error("torch_ddp.py times steps only: give it a config with val_batches: 0")
    args.model, args.train, args.data = config.model, config.train, config.data
    return args


# ---------------------------------------------------------------------------------------------
# The launcher.

def free_port():
    """A port nobody listens on now (the kernel's pick for port 0); rank 0's store binds it a
    moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((RENDEZVOUS, 0))
        return s.getsockname()[1]


def stop(procs):
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + KILL_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch(args, argv):
    """Starts the ranks and waits for them. Returns the exit status."""
    port = free_port()
    procs = []
    for rank in range(args.nproc):
        out = None if rank == 0 else subprocess.DEVNULL
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv,
                                       "--rank", str(rank), "--port", str(port)],
                                      stdout=out, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + args.timeout_s
    try:
        while True:
            codes = [proc.poll() for proc in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                print(f"torch_ddp: rank {rank} exited with {code}; stopping the others",
                      file=sys.stderr)
                return 1
            if all(c == 0 for c in codes):
                return 0
            if time.monotonic() > deadline:
                print(f"torch_ddp: the ranks ran past {args.timeout_s} s", file=sys.stderr)
                return 1
            time.sleep(POLL_S)
    finally:
        stop(procs)


# ---------------------------------------------------------------------------------------------
# A rank.

def allreduce_ms(torch, dist, numel):
    """The median time of a separate all-reduce of numel float32 values (see the docstring)."""
    buf = torch.ones(numel, dtype=torch.float32)
    times = []
    for rep in range(1 + ALLREDUCE_REPS):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        if rep:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def exposed_allreduce_ms(torch, dist, ddp, step_fn):
    """The time DDP's all-reduce adds to a step (see the docstring): step_fn(sync) runs one
    training step, with DDP's gradient all-reduce when sync, under no_sync otherwise. Returns
    (exposed, mean synchronised step, mean no_sync step), all ms."""
    times = {True: [], False: []}
    for _ in range(EXPOSED_PAIRS):
        for sync in (True, False):
            dist.barrier()
            t0 = time.perf_counter()
            if sync:
                step_fn()
            else:
                with ddp.no_sync():
                    step_fn()
            times[sync].append((time.perf_counter() - t0) * 1e3)
    synced, alone = statistics.mean(times[True]), statistics.mean(times[False])
    return synced - alone, synced, alone


def rank_main(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import gpt2_torch
    import kiln_data
    from torch_env import blas_facts

    cfg, h, world = args.model, args.train, args.nproc
    torch.set_num_threads(h["threads"])
    dist.init_process_group("gloo", init_method=f"tcp://{RENDEZVOUS}:{args.port}",
                            rank=args.rank, world_size=world,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    model = gpt2_torch.Gpt2(cfg)
    model.init_weights(h["seed"])
    ddp = DistributedDataParallel(model)
    hyper = gpt2_torch.Hyper(lr=h["lr"], min_lr=h["min_lr"], warmup_steps=h["warmup_steps"],
                             max_steps=h["max_steps"], weight_decay=h["weight_decay"],
                             beta1=h["beta1"], beta2=h["beta2"], eps=h["eps"],
                             grad_clip=h["grad_clip"])
    optimizer = gpt2_torch.make_optimizer(model, hyper)
    loader = kiln_data.Loader(kiln_data.read_stream(args.data["train"]), h["batch"], h["seq"],
                              h["seed"], rank=args.rank, world=world)
    tokens_per_step = world * h["batch"] * h["seq"]
    flops_per_token = cfg.flops_per_token(h["seq"])
    lead = args.rank == 0
    later_s = first_s = 0.0
    loss = float("nan")
    for step in range(1, h["max_steps"] + 1):
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        inputs, targets = loader.next()
        _, micro = ddp(torch.from_numpy(inputs), torch.from_numpy(targets))
        micro.backward()
        grad_norm, lr = gpt2_torch.clip_and_step(model, optimizer, hyper, step)
        step_s = max(time.perf_counter() - t0, 1e-9)
        if step == 1:
            first_s = step_s
        else:
            later_s += step_s
        loss = micro.item()
        tokens_per_s = tokens_per_step / step_s
        mfu = flops_per_token * tokens_per_s / (world * args.peak_gflops * 1e9) \
            if args.peak_gflops > 0 else None
        if lead:
            line = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                    "tokens_per_s": tokens_per_s, "step_ms": step_s * 1e3, "mfu": mfu,
                    "world": world}
            print(json.dumps(line) if args.json else
                  f"step {step}/{h['max_steps']} | loss {loss:.4f} | {tokens_per_s:.0f} tok/s "
                  f"| {step_s * 1e3:.0f} ms/step", flush=True)
        if not math.isfinite(loss):
            print(f"torch_ddp: rank {args.rank} step {step}: loss is {loss}: the run diverged",
                  file=sys.stderr)
            return 1
    def extra_step():
        # A training step past max_steps (its lr is the schedule's last): only its time counts.
        optimizer.zero_grad(set_to_none=True)
        inputs, targets = loader.next()
        _, extra = ddp(torch.from_numpy(inputs), torch.from_numpy(targets))
        extra.backward()
        gpt2_torch.clip_and_step(model, optimizer, hyper, h["max_steps"])

    exposed_ms, synced_ms, alone_ms = exposed_allreduce_ms(torch, dist, ddp, extra_step)
    comm_ms = allreduce_ms(torch, dist, cfg.num_params)
    steps = h["max_steps"]
    mean_rate = tokens_per_step * (steps - 1) / later_s if steps > 1 else \
        tokens_per_step / first_s
    if lead:
        done = {"event": "done", "steps": steps, "train_loss": loss, "val_loss": None,
                "tokens_per_s": mean_rate,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KIB,
                "allreduce_ms": comm_ms, "allreduce_bytes": 4 * cfg.num_params,
                "exposed_allreduce_ms": exposed_ms, "step_ms_synced": synced_ms,
                "step_ms_no_sync": alone_ms,
                "world": world, "backend": "gloo", "torch": torch.__version__,
                "torch_threads": torch.get_num_threads(), "flops_per_token": flops_per_token,
                "num_params": cfg.num_params, "attention": gpt2_torch.DEFAULT_ATTENTION,
                **blas_facts()}
        print(json.dumps(done) if args.json else
              f"done: {steps} steps, {mean_rate:.0f} tok/s, all-reduce of "
              f"{4 * cfg.num_params / 1e6:.0f} MB {comm_ms:.0f} ms", flush=True)
    dist.barrier()  # every rank is done before any leaves
    return 0


def main(argv):
    args = parse_args(argv)
    if args.rank is None:
        return launch(args, argv)
    try:
        code = rank_main(args)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"torch_ddp: rank {args.rank}: {e}", file=sys.stderr)
        code = 1
    # torch 1.13's teardown deadlocks: the interpreter's exit drops DDP's Reducer, whose
    # ProcessGroupGloo joins a worker thread that waits for the GIL the exiting main thread
    # holds (seen here with gdb: ~ProcessGroupGloo in std::thread::join, the worker in
    # ~TensorImpl -> PyEval_AcquireThread). Nothing is left to write (stdout is flushed), so
    # the rank leaves without the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
