#!/usr/bin/env python3
"""Tests of bench/train: the PyTorch model and trainer, and the driver (through a fake `kiln`
that prints `kiln train --json` lines, so the figures it reports are known).

  /usr/bin/python3 bench/train/run_test.py [-v]

What users rely on: a Kiln safetensors file loads by name with every shape checked and a bad
one is named; torch_train.py follows the config and the flags, prints Kiln's JSON fields, and
starts from --init exactly; the driver computes tokens/s from steps 2..S only, checks Kiln's
flops_per_token against its own, reports the goals, fails on a failed run and says n/a for a
missing Kiln; with --precision bf16, torch_train.py runs its forward under autocast, and the
driver takes the median of its bf16 peak runs, judges the goals by the CPU's flags, and puts
its three sides in the table. The driver tests run real torch on the real shards for two
steps, so the file takes two to three minutes. bench/lib's tests run here too.
"""
import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "lib"))
import driver_testing  # noqa: E402
import gpt2_torch  # noqa: E402
import machine  # noqa: E402
import train_config  # noqa: E402
# bench/lib's tests (what the driver and torch_train.py rely on) run with this file's.
from kiln_data_test import LoaderTest, RngTest, ShardTest  # noqa: E402,F401
from torch_env_test import GuardsTest, HelpersTest  # noqa: E402,F401

RUN = os.path.join(HERE, "run")
TORCH_TRAIN = os.path.join(HERE, "torch_train.py")
TORCH_DDP = os.path.join(HERE, "torch_ddp.py")
TORCH_PYTHON = "/usr/bin/python3"
CHILD_TIMEOUT_S = 600  # a quick driver run takes about a minute
SHARDS = os.path.join(ROOT, "data", "sotu", "train")
SMALL = gpt2_torch.GptConfig(n_layer=2, n_head=2, n_embd=16, block_size=32, vocab_size=97)


def write_safetensors(path, tensors, metadata):
    """A minimal safetensors writer (F32/I32), as Kiln's export lays files out."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def small_metadata(config):
    meta = {k: str(getattr(config, k)) for k in train_config.MODEL_KEYS}
    return dict(meta, format="kiln-gpt2")


def write_shards(directory, n, vocab, seed):
    os.makedirs(directory)
    tokens = np.random.default_rng(seed).integers(0, vocab, n).astype("<u2")
    with open(os.path.join(directory, "shard_000000.bin"), "wb") as fh:
        fh.write(struct.pack("<8sIIQQ", b"KILNTOK1", 1, 32, n, 0) + tokens.tobytes())


class ModelTest(unittest.TestCase):
    def test_counts_match_the_module(self):
        model = gpt2_torch.Gpt2(SMALL)
        self.assertEqual(SMALL.num_params, sum(p.numel() for p in model.parameters()))
        tiny = train_config.load(os.path.join(ROOT, "configs", "tiny.yaml")).model
        self.assertEqual(tiny.num_params, 30044544)  # Kiln's "params" for tiny
        self.assertEqual(tiny.flops_per_token(256), 6 * 30044544 + 6 * 6 * 384 * 256)
        self.assertEqual(tiny.padded_vocab, 50304)

    def test_sdpa_and_written_out_attention_agree(self):
        a = gpt2_torch.Gpt2(SMALL, attention="manual").double()
        a.init_weights(3)
        b = gpt2_torch.Gpt2(SMALL, attention="sdpa").double()
        b.load_state_dict(a.state_dict())
        x = torch.randint(0, SMALL.vocab_size, (2, 11))
        self.assertLess(float((a(x)[0] - b(x)[0]).abs().max()), 1e-12)

    def test_attention_is_causal(self):
        model = gpt2_torch.Gpt2(SMALL).double()
        model.init_weights(4)
        x = torch.randint(0, SMALL.vocab_size, (1, 12))
        y = x.clone()
        y[0, 8:] = (y[0, 8:] + 1) % SMALL.vocab_size  # change only the future of position 7
        self.assertLess(float((model(x)[0][0, :8] - model(y)[0][0, :8]).abs().max()), 1e-12)

    def test_kiln_file_loads_by_name_and_bad_files_are_named(self):
        source = gpt2_torch.Gpt2(SMALL)
        source.init_weights(5)
        with tempfile.TemporaryDirectory(prefix="gpt2-torch-test-") as tmp:
            path = os.path.join(tmp, "w.safetensors")
            tensors = {n: p.detach() for n, p in source.named_parameters()}
            write_safetensors(path, tensors, small_metadata(SMALL))
            model = gpt2_torch.load_kiln_weights(path, dtype=torch.float64)
            for name, p in model.named_parameters():
                self.assertTrue(torch.equal(p.float(), tensors[name]), name)
            bad = dict(tensors, **{"h.0.attn.qkv.weight": torch.zeros(16, 48)})  # transposed
            write_safetensors(path, bad, small_metadata(SMALL))
            with self.assertRaisesRegex(ValueError, "h.0.attn.qkv.weight has shape"):
                gpt2_torch.load_kiln_weights(path)
            del bad["ln_f.bias"]
            write_safetensors(path, bad, small_metadata(SMALL))
            with self.assertRaisesRegex(ValueError, "missing \\['ln_f.bias'\\]"):
                gpt2_torch.load_kiln_weights(path)
            write_safetensors(path, tensors, dict(small_metadata(SMALL), format="other"))
            with self.assertRaisesRegex(ValueError, "format"):
                gpt2_torch.load_kiln_weights(path)

    def test_schedule_is_kilns(self):
        h = gpt2_torch.Hyper(lr=6e-4, min_lr=6e-5, warmup_steps=30, max_steps=300,
                             weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0)
        self.assertAlmostEqual(gpt2_torch.learning_rate(h, 1), 6e-4 / 30)
        self.assertAlmostEqual(gpt2_torch.learning_rate(h, 30), 6e-4)
        self.assertAlmostEqual(gpt2_torch.learning_rate(h, 165), (6e-4 + 6e-5) / 2)
        self.assertEqual(gpt2_torch.learning_rate(h, 300), 6e-5)

    def test_decay_groups(self):
        groups = gpt2_torch.param_groups(gpt2_torch.Gpt2(SMALL), 0.1)
        self.assertEqual(sum(p.numel() for p in groups[0]["params"]),
                         SMALL.num_params - sum(p.numel() for p in groups[1]["params"]))
        self.assertTrue(all(p.dim() == 2 for p in groups[0]["params"]))
        self.assertTrue(all(p.dim() == 1 for p in groups[1]["params"]))
        self.assertEqual(groups[1]["weight_decay"], 0.0)


class TorchTrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="torch-train-test-")
        d = self.tmp.name
        write_shards(os.path.join(d, "train"), 4000, SMALL.vocab_size, 1)
        write_shards(os.path.join(d, "val"), 1000, SMALL.vocab_size, 2)
        model = ", ".join(f"{k}: {getattr(SMALL, k)}" for k in train_config.MODEL_KEYS)
        self.config = os.path.join(d, "small.yaml")
        with open(self.config, "w", encoding="utf-8") as fh:
            fh.write(f"model: {{{model}}}\ndata: {{train: {d}/train, val: {d}/val}}\n"
                     "train: {batch: 2, seq: 16, max_steps: 5, warmup_steps: 2, val_every: 2, "
                     "val_batches: 2, threads: 1}\n")

    def tearDown(self):
        self.tmp.cleanup()

    def train(self, *flags):
        r = subprocess.run([TORCH_PYTHON, TORCH_TRAIN, self.config, "--json", *flags],
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        return r, lines

    def test_json_lines_follow_the_config_and_flags(self):
        r, lines = self.train("--max-steps", "4", "--peak-gflops", "10")
        self.assertEqual(r.returncode, 0, r.stderr)
        steps, done = lines[:-1], lines[-1]
        self.assertEqual([x["step"] for x in steps], [1, 2, 3, 4])
        for x in steps:
            for key in ("loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu"):
                self.assertIn(key, x)
            self.assertAlmostEqual(x["tokens_per_s"], 2 * 16 / (x["step_ms"] / 1e3), places=3)
            self.assertAlmostEqual(x["mfu"], SMALL.flops_per_token(16) * x["tokens_per_s"] /
                                   10e9)
        self.assertEqual([("val_loss" in x) for x in steps], [False, True, False, True])
        self.assertAlmostEqual(steps[0]["lr"], 6e-4 / 2)
        self.assertEqual(steps[-1]["lr"], 6e-5)  # max_steps 4 from the flag ends the cosine
        self.assertEqual(done["event"], "done")
        self.assertEqual(done["steps"], 4)
        self.assertEqual(done["val_loss"], steps[-1]["val_loss"])
        self.assertEqual(done["flops_per_token"], SMALL.flops_per_token(16))
        self.assertEqual(done["torch_threads"], 1)
        self.assertGreater(done["peak_rss_bytes"], 100 << 20)

    def test_init_file_is_the_start(self):
        source = gpt2_torch.Gpt2(SMALL)
        source.init_weights(11)
        init = os.path.join(self.tmp.name, "init.safetensors")
        write_safetensors(init, {n: p.detach() for n, p in source.named_parameters()},
                          small_metadata(SMALL))
        r, lines = self.train("--max-steps", "1", "--init", init)
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg = train_config.load(self.config)
        import kiln_data  # noqa: E402  (only this test needs the loader)
        loader = kiln_data.Loader(kiln_data.read_stream(cfg.data["train"]), 2, 16, 1337)
        x, y = loader.next()
        _, loss = source(torch.from_numpy(x), torch.from_numpy(y))
        self.assertAlmostEqual(lines[0]["loss"], float(loss), places=5)

    def test_bf16_runs_the_forward_under_autocast(self):
        _, fp32 = self.train("--max-steps", "2")
        r, bf16 = self.train("--max-steps", "2", "--precision", "bf16")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual((fp32[-1]["precision"], bf16[-1]["precision"]), ("fp32", "bf16"))
        # The same weights and batch: step 1's loss differs only by bf16's rounding of the
        # matrix products' inputs, which does change it.
        a, b = fp32[0]["loss"], bf16[0]["loss"]
        self.assertNotEqual(a, b)
        self.assertLess(abs(a - b) / a, 0.02)
        self.assertEqual([x["step"] for x in bf16[:-1]], [1, 2])
        self.assertIn("val_loss", bf16[1])  # the last step validates, under autocast too
        r, _ = self.train("--precision", "fp16")
        self.assertEqual(r.returncode, 2)

    def test_bad_flags_and_files(self):
        r, _ = self.train("--seq", "64")  # beyond block_size 32
        self.assertEqual(r.returncode, 2)
        self.assertIn("block_size", r.stderr)
        r, _ = self.train("--threads", "0")
        self.assertEqual(r.returncode, 2)
        r, _ = self.train("--init", os.path.join(self.tmp.name, "missing.safetensors"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing.safetensors", r.stderr)


class TorchDdpTest(unittest.TestCase):
    """torch_ddp.py on a small model: two gloo ranks on 127.0.0.1, rank r on its slice."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="torch-ddp-test-")
        d = self.tmp.name
        write_shards(os.path.join(d, "train"), 4000, SMALL.vocab_size, 1)
        write_shards(os.path.join(d, "val"), 1000, SMALL.vocab_size, 2)
        model = ", ".join(f"{k}: {getattr(SMALL, k)}" for k in train_config.MODEL_KEYS)
        self.config = os.path.join(d, "small.yaml")
        with open(self.config, "w", encoding="utf-8") as fh:
            fh.write(f"model: {{{model}}}\ndata: {{train: {d}/train, val: {d}/val}}\n"
                     "train: {batch: 2, seq: 16, max_steps: 3, warmup_steps: 2, "
                     "val_batches: 0, threads: 1}\n")

    def tearDown(self):
        self.tmp.cleanup()

    def run_json(self, script, *flags):
        r = subprocess.run([TORCH_PYTHON, script, self.config, "--json", *flags],
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        return r, [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]

    def test_two_ranks_train_the_global_batch(self):
        r, lines = self.run_json(TORCH_DDP, "--nproc", "2", "--peak-gflops", "10")
        self.assertEqual(r.returncode, 0, r.stderr)
        steps, done = lines[:-1], lines[-1]
        self.assertEqual([x["step"] for x in steps], [1, 2, 3])  # rank 0's lines only
        for x in steps:
            self.assertEqual(x["world"], 2)
            self.assertAlmostEqual(x["tokens_per_s"], 2 * 2 * 16 / (x["step_ms"] / 1e3),
                                   places=3)
            self.assertAlmostEqual(x["mfu"], SMALL.flops_per_token(16) * x["tokens_per_s"] /
                                   (2 * 10e9))
        self.assertEqual(done["event"], "done")
        self.assertEqual((done["world"], done["backend"]), (2, "gloo"))
        self.assertEqual(done["allreduce_bytes"], 4 * SMALL.num_params)
        self.assertGreater(done["allreduce_ms"], 0)
        # The exposed all-reduce is synchronised steps minus no_sync steps, both measured.
        self.assertGreater(done["step_ms_synced"], 0)
        self.assertGreater(done["step_ms_no_sync"], 0)
        self.assertAlmostEqual(done["exposed_allreduce_ms"],
                               done["step_ms_synced"] - done["step_ms_no_sync"])
        self.assertEqual(done["torch_threads"], 1)
        # Rank 0 takes the first half of the global batch of 4, so its step-1 loss is
        # torch_train.py's on batch 2; DDP averages the ranks' gradients, so the step-1
        # gradient norm is torch_train.py's on the whole batch of 4.
        _, half = self.run_json(TORCH_TRAIN, "--max-steps", "1")
        _, whole = self.run_json(TORCH_TRAIN, "--max-steps", "1", "--batch", "4")
        self.assertAlmostEqual(steps[0]["loss"], half[0]["loss"], places=5)
        self.assertAlmostEqual(steps[0]["grad_norm"] / whole[0]["grad_norm"], 1.0, places=4)

    def test_bad_flags(self):
        r, _ = self.run_json(TORCH_DDP, "--nproc", "0")
        self.assertEqual(r.returncode, 2)
        r, _ = self.run_json(TORCH_DDP)  # --nproc is required
        self.assertEqual(r.returncode, 2)
        r = subprocess.run([TORCH_PYTHON, TORCH_DDP, self.config, "--nproc", "2", "--seq",
                            "64"], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        self.assertEqual(r.returncode, 2)
        self.assertIn("block_size", r.stderr)


# The fake `kiln`'s train: S step lines with step_ms 1000 * (step + 1) and an mfu made from
# FAKE_FLOPS (the true count unless a test says otherwise), holding FAKE_RSS_MIB of memory;
# with --nproc W, W times the tokens and comm_exposed_ms 10 * step; with --ckpt-every N,
# ckpt_stall_ms 50 on every N-th and the last step.
# With --precision bf16 every step takes a quarter of the time.
# bench/lib/driver_testing.py answers --help and version, and fails under FAKE_KILN_FAIL.
FAKE_TRAIN = """\
    flags = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and arg != "--json":
            flags[arg] = args[i + 1]
    steps, tokens = int(flags["--max-steps"]), int(flags["--batch"]) * int(flags["--seq"])
    world = int(flags.get("--nproc", "1"))
    tokens *= world
    every = int(flags.get("--ckpt-every", "0"))
    peak = float(flags.get("--peak-gflops", "0"))
    flops = float(os.environ["FAKE_FLOPS"])
    held = bytearray(int(os.environ.get("FAKE_RSS_MIB", "0")) << 20)
    for step in range(1, steps + 1):
        ms = 1000.0 * (step + 1) / (4 if flags.get("--precision") == "bf16" else 1)
        rate = tokens / (ms / 1e3)
        print(json.dumps({"step": step, "loss": 5.0, "lr": 1e-4, "grad_norm": 1.0,
                          "tokens_per_s": rate, "step_ms": ms,
                          "mfu": flops * rate / (world * peak * 1e9) if peak else 0,
                          "world": world, "comm_exposed_ms": 10.0 * step,
                          "ckpt_stall_ms": 50.0 if every and (step % every == 0 or
                                                              step == steps) else 0}))
    rss = int(os.environ.get("FAKE_PEAK_RSS_ZERO" + flags.get("--zero", "0"), "1"))
    print(json.dumps({"event": "done", "steps": steps, "train_loss": 5.0, "val_loss": None,
                      "tokens_per_s": 1.0, "peak_rss_bytes": rss,
                      "precision": os.environ.get("FAKE_PRECISION",
                                                  flags.get("--precision", "fp32"))}))
    """


# The fake `kiln`'s ops-bench: one JSON line whose gflops are the values of FAKE_BF16_GFLOPS
# (comma-separated) in turn, counted in the file FAKE_COUNTER, and whose dtype is
# FAKE_BF16_DTYPE (bf16 unless a test says otherwise). Put before FAKE_TRAIN.
FAKE_OPS_BENCH = """\
    if args[:1] == ["ops-bench"]:
        values = [float(x) for x in os.environ.get("FAKE_BF16_GFLOPS", "1000").split(",")]
        n = 0
        counter = os.environ.get("FAKE_COUNTER")
        if counter:
            if os.path.exists(counter):
                with open(counter) as fh:
                    n = int(fh.read())
            with open(counter, "w") as fh:
                fh.write(str(n + 1))
        print(json.dumps({"op": "matmul", "dtype": os.environ.get("FAKE_BF16_DTYPE", "bf16"),
                          "threads": int(args[args.index("--threads") + 1]), "isa": "avx512",
                          "kernel": "brg:avx512_core_amx_bf16",
                          "gflops": values[n % len(values)]}))
        sys.exit(0)
"""


def fake_results(rates, rss_mib=100, peaks=None, flops=6):
    """summarise()-shaped results {item: {side: ...}} from {item: {side: tokens/s or None}};
    mfu is rate x flops / peaks[side] (GFLOP/s) when a peak is given."""
    out = {}
    for name, sides in rates.items():
        out[name] = {}
        for side, rate in sides.items():
            peak = (peaks or {}).get(side)
            out[name][side] = {"tokens_per_s": rate,
                               "mfu": rate * flops / (peak * 1e9) if rate and peak else None,
                               "maxrss_kib": rss_mib * 1024 if rate else None,
                               "failed": 0 if rate else 1, "samples": [rate], "runs": []}
    return out


def fake_items(models, threads):
    return [type("I", (), {"model": m, "threads": t, "name": f"{m}-t{t}",
                           "batch": 8 if m == "tiny" else 1, "seq": 256})
            for m in models for t in threads]


class DriverTest(unittest.TestCase):
    TINY_FLOPS = 6 * 30044544 + 6 * 6 * 384 * 256

    @classmethod
    def setUpClass(cls):
        cls.driver = driver_testing.load_script(RUN, "train_run")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="train-run-test-")
        self.kiln = driver_testing.write_fake_kiln(
            self.tmp.name, ["version", "train"], "kiln fake-2.0", "train: the model exploded",
            FAKE_TRAIN)
        self.out = os.path.join(self.tmp.name, "results.json")

    def tearDown(self):
        self.tmp.cleanup()

    def drive(self, extra_env, *flags):
        env = dict(os.environ, KILN=self.kiln, FAKE_FLOPS=str(self.TINY_FLOPS))
        env.update(extra_env)
        r = subprocess.run([RUN, "--quiet-wait-s", "0", "--noisy-retries", "0", "--out",
                            self.out, *flags], capture_output=True, text=True, env=env,
                           timeout=CHILD_TIMEOUT_S)
        report = None
        if os.path.exists(self.out):
            with open(self.out, encoding="utf-8") as fh:
                report = json.load(fh)
        return r, report

    @unittest.skipUnless(os.path.isdir(SHARDS), "run scripts/fetch-data")
    def test_quick_run_reaches_the_table(self):
        r, report = self.drive({"FAKE_RSS_MIB": "64"}, "--quick", "--steps", "3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        kiln = report["items"]["tiny-t2"]["sides"]["kiln"]
        # Steps 2 and 3 take 3 s and 4 s: 2 * 2048 tokens in 7 s; step 1 (2 s) is not counted.
        self.assertAlmostEqual(kiln["tokens_per_s"], 2 * 2048 / 7.0)
        self.assertGreater(kiln["maxrss_kib"], 64 * 1024)
        torch_rate = report["items"]["tiny-t2"]["sides"]["torch"]["tokens_per_s"]
        self.assertGreater(torch_rate, 0)
        self.assertIn(f"| tiny | 8 x 256 | 2 | {2 * 2048 / 7.0:.0f} |", r.stdout)
        self.assertIn(f"{2 * 2048 / 7.0 / torch_rate:.2f}x", r.stdout)
        self.assertIn("Kiln's, from its MFU: 1.83806e+08 (agrees", r.stdout)
        self.assertIn("torch_train.py's: the same", r.stdout)
        verdict = "met" if 2 * 2048 / 7.0 >= 1.05 * torch_rate else "not met"
        self.assertIn(f"goal, tiny on 2 thread(s): Kiln >= 1.05x tuned torch: {verdict} ",
                      r.stdout)
        self.assertIn("kiln fake-2.0", r.stdout)
        self.assertIn("bench/train/run --quiet-wait-s 0", r.stdout.splitlines()[3])
        self.assertIn("tiny-noval.yaml --batch 8 --seq 256 --threads 2 --max-steps 3",
                      kiln["runs"][0]["argv"])
        self.assertGreater(report["peaks"]["sgemm"]["2"], 0)

    @unittest.skipUnless(os.path.isdir(SHARDS), "run scripts/fetch-data")
    def test_bf16_quick_run_reaches_the_table(self):
        self.kiln = driver_testing.write_fake_kiln(
            self.tmp.name, ["version", "train", "ops-bench"], "kiln fake-2.0",
            "train: the model exploded", FAKE_OPS_BENCH + FAKE_TRAIN)
        r, report = self.drive({"FAKE_BF16_GFLOPS": "900,1100,1000",
                                "FAKE_COUNTER": os.path.join(self.tmp.name, "count")},
                               "--precision", "bf16", "--quick", "--steps", "3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(report["peaks"]["bf16"], {"1": 1000.0, "2": 1000.0})  # medians
        sides = report["items"]["tiny-t2"]["sides"]
        # Steps 2 and 3 take 3 s and 4 s in fp32, a quarter of that in bf16.
        bf16, fp32 = 2 * 2048 / 1.75, 2 * 2048 / 7.0
        self.assertAlmostEqual(sides["kiln_bf16"]["tokens_per_s"], bf16)
        self.assertAlmostEqual(sides["kiln"]["tokens_per_s"], fp32)
        self.assertAlmostEqual(sides["kiln_bf16"]["mfu"], bf16 * self.TINY_FLOPS / 1e12)
        torch_rate = sides["torch_bf16"]["tokens_per_s"]
        self.assertGreater(torch_rate, 0)
        self.assertEqual(sides["torch_bf16"]["runs"][0]["done"]["precision"], "bf16")
        self.assertIn(f"| tiny | 8 x 256 | 2 | {bf16:.0f} | {bf16 * self.TINY_FLOPS / 1e12:.1%} "
                      f"| {fp32:.0f} |", r.stdout)
        self.assertIn(f"| 4.00x | {bf16 / torch_rate:.2f}x |", r.stdout)
        self.assertIn("Kiln's, from its MFU: 1.83806e+08 (agrees", r.stdout)
        self.assertIn("torch_train.py's: the same", r.stdout)
        self.assertIn("--max-steps 3 --json --peak-gflops 1000.0 --precision bf16",
                      sides["kiln_bf16"]["runs"][0]["argv"])
        self.assertIn("--precision bf16", sides["torch_bf16"]["runs"][0]["argv"])
        self.assertNotIn("--precision", sides["kiln"]["runs"][0]["argv"])
        kind = self.driver.bf16_cpu_kind(machine.cpu_flags())
        self.assertIn("do not apply here" if kind is None else
                      "n/a (gpt2-124m is not in this run)", r.stdout)

    @unittest.skipUnless(os.path.isdir(SHARDS), "run scripts/fetch-data")
    def test_wrong_flop_count_and_failure_are_reported(self):
        r, report = self.drive({"FAKE_FLOPS": str(self.TINY_FLOPS * 1.01)}, "--quick",
                               "--sides", "kiln")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("(DIFFERS, worst 1.0e-02)", r.stdout)
        self.assertEqual(report["items"]["tiny-t2"]["sides"]["torch"]["runs"], [])
        r, report = self.drive({"FAKE_KILN_FAIL": "1"}, "--quick", "--sides", "kiln")
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED: kiln tiny-t2: exit 3: train: the model exploded", r.stdout)
        self.assertIsNone(report["items"]["tiny-t2"]["sides"]["kiln"]["tokens_per_s"])

    def test_goals_from_results(self):
        d = self.driver

        def side(rate, rss_mib):
            return {"tokens_per_s": rate, "maxrss_kib": rss_mib * 1024}

        items = [type("I", (), {"model": m, "threads": t, "name": f"{m}-t{t}"})
                 for m in ("tiny", "gpt2-124m") for t in (1, 2)]
        results = {
            "tiny-t1": {"kiln": side(500, 1), "torch": side(476, 1)},
            "tiny-t2": {"kiln": side(900, 1), "torch": side(900, 1)},
            "gpt2-124m-t1": {"kiln": side(130, 900), "torch": side(70, 1000)},
            "gpt2-124m-t2": {"kiln": side(200, 1100), "torch": side(100, 1200)},
        }
        lines = d.goal_lines(items, results)
        self.assertIn("tiny on 1 thread(s): Kiln >= 1.00x tuned torch: met (1.05x)", lines[0])
        self.assertIn("tiny on 2 thread(s): Kiln >= 1.05x tuned torch: not met (1.00x)",
                      lines[1])
        self.assertIn(": met (Kiln 200 tok/s on 2 thread(s), tuned torch 100 on 2: 2.00x",
                      lines[2])
        results["gpt2-124m-t2"]["kiln"] = side(200, 1300)  # more memory than torch's
        self.assertIn("not met", d.goal_lines(items, results)[2])

    def parse(self, *argv):
        """The driver's parse_args on argv, or the exit status it stopped with."""
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                return self.driver.parse_args(list(argv))
            except SystemExit as e:
                return e.code

    def test_precision_flag(self):
        d = self.driver
        fp32 = self.parse()
        self.assertEqual((fp32.precision, fp32.side_list, fp32.out),
                         ("fp32", ["kiln", "torch", "torch_untuned"], d.RESULTS_DEFAULT))
        bf16 = self.parse("--precision", "bf16")
        self.assertEqual((bf16.precision, bf16.side_list, bf16.out),
                         ("bf16", ["kiln_bf16", "kiln", "torch_bf16"], d.RESULTS_BF16_DEFAULT))
        self.assertEqual((bf16.model_list, bf16.thread_list, bf16.repeats, bf16.steps),
                         (["tiny", "gpt2-124m"], [1, 2], 3, 4))
        quick = self.parse("--precision", "bf16", "--quick")
        self.assertEqual((quick.model_list, quick.thread_list, quick.repeats, quick.steps),
                         (["tiny"], [2], 1, 2))
        some = self.parse("--precision", "bf16", "--sides", "torch_bf16,kiln_bf16", "--models",
                          "gpt2-124m", "--threads", "1", "--repeats", "2")
        self.assertEqual((some.side_list, some.model_list, some.thread_list, some.repeats),
                         (["torch_bf16", "kiln_bf16"], ["gpt2-124m"], [1], 2))
        learning = self.parse("--learning", "--precision", "bf16")
        self.assertEqual((learning.steps, learning.out), (300, d.LEARNING_BF16_DEFAULT))
        self.assertEqual(self.parse("--learning", "--precision", "bf16", "--quick").steps, 20)
        self.assertEqual(self.parse("--learning").out, d.LEARNING_DEFAULT)
        self.assertTrue(self.parse("--ddp", "--precision", "fp32").ddp)
        self.assertIsNone(bf16.batch)
        wider = self.parse("--precision", "bf16", "--batch", "16", "--models", "gpt2-124m")
        self.assertEqual((wider.batch, wider.out),
                         (16, os.path.join(d.BUILD, "results-bf16-b16.json")))
        items = [d.Item(m, 2, 4, "c.yaml", wider.batch) for m in ("tiny", "gpt2-124m")]
        self.assertEqual([(i.batch, i.seq) for i in items], [(16, 256), (16, 256)])
        self.assertEqual(items[1].flags(None)[:4], ["--batch", "16", "--seq", "256"])
        self.assertEqual([i.timeout_scale for i in items], [2, 16])  # tiny's brief batch is 8
        self.assertEqual(d.Item("gpt2-124m", 2, 4, "c.yaml").batch, 1)  # the brief's
        for bad in (["--batch", "0"], ["--batch", "33"], ["--batch", "4", "--learning"],
                    ["--batch", "4", "--ddp"], ["--batch", "4", "--zero-rss"],
                    ["--precision", "fp16"], ["--precision", "bf16", "--ddp"],
                    ["--precision", "bf16", "--zero-rss"],
                    ["--precision", "bf16", "--sides", "torch"], ["--sides", "kiln_bf16"],
                    ["--precision", "bf16", "--threads", "3"]):
            self.assertEqual(self.parse(*bad), 2, bad)

    def test_a_kiln_bf16_run_that_ran_fp32_fails(self):
        self.kiln = driver_testing.write_fake_kiln(
            self.tmp.name, ["version", "train", "ops-bench"], "kiln fake-2.0",
            "train: the model exploded", FAKE_OPS_BENCH + FAKE_TRAIN)
        r, _ = self.drive({"FAKE_PRECISION": "fp32"}, "--precision", "bf16", "--quick",
                          "--steps", "3", "--sides", "kiln_bf16")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("kiln train ran precision 'fp32', not bf16", r.stdout + r.stderr)

    def test_bf16_commands_and_peaks_of_each_side(self):
        d = self.driver
        config = os.path.join(ROOT, "c.yaml")
        self.assertEqual(d.side_argv("kiln_bf16", "/k", config, ["--json"]),
                         ["/k", "train", "c.yaml", "--json", "--precision", "bf16"])
        self.assertEqual(d.side_argv("kiln", "/k", config, ["--json"]),
                         ["/k", "train", "c.yaml", "--json"])
        self.assertEqual(d.side_argv("torch_bf16", "/k", config, ["--json"])[1:],
                         ["bench/train/torch_train.py", "c.yaml", "--json", "--precision",
                          "bf16"])
        peaks = {"sgemm": {1: 100.0, 2: 190.0}, "bf16": {1: 500.0, 2: 990.0}}
        self.assertEqual([d.side_peak(peaks, s, 2) for s in
                          ("kiln_bf16", "kiln", "torch_bf16", "torch", "torch_untuned")],
                         [990.0, 190.0, 990.0, 190.0, 190.0])
        self.assertIsNone(d.side_peak({"sgemm": {2: 1.0}}, "kiln_bf16", 2))
        self.assertEqual(d.bf16_peak_argv("/k", 2),
                         ["/k", "ops-bench", "--op", "matmul", "--dtype", "bf16", "--shape",
                          "M=2048,N=2048,K=2048", "--pass", "fwd", "--threads", "2", "--iters",
                          "10", "--json"])
        argv = d.learning_bf16_argvs("/k", ["configs/tiny.yaml", "--json"],
                                     os.path.join(ROOT, "build", "i.safetensors"))
        self.assertEqual(list(argv), ["kiln", "kiln_bf16", "torch_bf16"])
        self.assertEqual(argv["kiln"], ["/k", "train", "configs/tiny.yaml", "--json"])
        self.assertEqual(argv["kiln_bf16"], ["/k", "train", "configs/tiny.yaml", "--json",
                                             "--precision", "bf16"])
        self.assertEqual(argv["torch_bf16"][1:], ["bench/train/torch_train.py",
                                                  "configs/tiny.yaml", "--json", "--init",
                                                  "build/i.safetensors", "--precision", "bf16"])

    def test_bf16_peak_is_the_median_of_its_runs(self):
        d = self.driver
        folder = os.path.join(self.tmp.name, "ops")
        os.makedirs(folder)
        kiln = driver_testing.write_fake_kiln(folder, ["ops-bench"], "kiln fake-2.0",
                                              "ops-bench: no oneDNN", FAKE_OPS_BENCH)
        counter = os.path.join(self.tmp.name, "count")
        env = {"FAKE_BF16_GFLOPS": "900,5000,1000,100,1100", "FAKE_COUNTER": counter}
        with unittest.mock.patch.dict(os.environ, env):
            gflops, facts, why = d.bf16_peaks(kiln, (1, 2), None, runs=5)
        self.assertIsNone(why)
        self.assertEqual(gflops, {1: 1000.0, 2: 1000.0})  # not the mean (1620) nor the best
        self.assertEqual(facts[2], {"samples": [900.0, 5000.0, 1000.0, 100.0, 1100.0],
                                    "isa": "avx512", "kernel": "brg:avx512_core_amx_bf16"})
        with unittest.mock.patch.dict(os.environ, dict(env, FAKE_BF16_DTYPE="f32")):
            gflops, _, why = d.bf16_peaks(kiln, (1,), None, runs=2)
        self.assertEqual(gflops, {})
        self.assertIn("no bf16 JSON line with gflops", why)
        with unittest.mock.patch.dict(os.environ, dict(env, FAKE_KILN_FAIL="1")):
            gflops, _, why = d.bf16_peaks(kiln, (2,), None, runs=2)
        self.assertEqual(gflops, {})
        self.assertIn("on 2 thread(s): exit 3: ops-bench: no oneDNN", why)
        text = d.bf16_peak_text({1: 512.25}, {1: {"isa": "avx512"}})
        self.assertIn("median of 5 runs): 1 thread 512.2 GFLOP/s (isa avx512), 2 threads n/a "
                      "GFLOP/s", text)
        text = d.bf16_peak_text({2: 80.5}, {2: {"isa": "avx2", "kernel": "widened to f32"}})
        self.assertIn("2 threads 80.5 GFLOP/s (isa avx2, kernel widened to f32)", text)

    def test_bf16_goals_by_cpu(self):
        d = self.driver
        amx, avx512 = {"amx_bf16", "amx_tile", "avx512_bf16", "avx512f"}, {"avx512_bf16"}
        self.assertEqual([d.bf16_cpu_kind(f) for f in (amx, avx512, {"amx_tile", "avx512f"})],
                         ["amx_bf16", "avx512_bf16", None])
        items = fake_items(("tiny", "gpt2-124m"), (1, 2))
        results = fake_results({
            "tiny-t1": {"kiln_bf16": 900, "kiln": 500, "torch_bf16": 450},
            "tiny-t2": {"kiln_bf16": 1700, "kiln": 900, "torch_bf16": 800},
            "gpt2-124m-t1": {"kiln_bf16": 200, "kiln": 70, "torch_bf16": 150},
            "gpt2-124m-t2": {"kiln_bf16": 330, "kiln": 100, "torch_bf16": 200}})
        head = "goal, gpt2-124m on this CPU (with amx_bf16): Kiln bf16 >= "
        lines = d.bf16_goal_lines(amx, items, results)
        self.assertEqual(lines, [
            f"{head}3.0x Kiln fp32, each at its better thread count: met (Kiln bf16 330 tok/s "
            "on 2 thread(s), Kiln fp32 100 on 2: 3.30x)",
            f"{head}1.5x torch autocast, each at its better thread count: met (Kiln bf16 330 "
            "tok/s on 2 thread(s), torch autocast 200 on 2: 1.65x)"])
        # torch autocast's better thread count is its own: 1 thread here.
        results["gpt2-124m-t1"]["torch_bf16"]["tokens_per_s"] = 250
        self.assertIn("not met (Kiln bf16 330 tok/s on 2 thread(s), torch autocast 250 on 1: "
                      "1.32x)", d.bf16_goal_lines(amx, items, results)[1])
        lines = d.bf16_goal_lines(avx512, items, results)
        self.assertEqual(lines, [
            "goal, gpt2-124m on this CPU (with avx512_bf16, no amx_bf16): Kiln bf16 >= 1.4x "
            "Kiln fp32, each at its better thread count: met (Kiln bf16 330 tok/s on 2 "
            "thread(s), Kiln fp32 100 on 2: 3.30x)"])
        results["gpt2-124m-t1"]["kiln"]["tokens_per_s"] = 250
        self.assertIn(": not met (Kiln bf16 330 tok/s on 2 thread(s), Kiln fp32 250 on 1: "
                      "1.32x)", d.bf16_goal_lines(avx512, items, results)[0])
        self.assertIn(": not met (", d.bf16_goal_lines(amx, items, results)[0])
        self.assertEqual(d.bf16_goal_lines({"avx512f"}, items, results),
                         ["goals: this CPU has neither amx_bf16 nor avx512_bf16 in lscpu's "
                          "flags: the bf16 goals do not apply here"])
        tiny_only = d.bf16_goal_lines(amx, items[:2], results)
        self.assertEqual(len(tiny_only), 2)
        self.assertTrue(all(x.endswith(": n/a (gpt2-124m is not in this run)")
                            for x in tiny_only))
        for name in ("gpt2-124m-t1", "gpt2-124m-t2"):
            results[name]["kiln_bf16"]["tokens_per_s"] = None
        self.assertTrue(d.bf16_goal_lines(avx512, items, results)[0].endswith(
            ": n/a (not measured)"))

    def test_bf16_table(self):
        d = self.driver
        items = fake_items(("tiny",), (2,))
        results = fake_results({"tiny-t2": {"kiln_bf16": 2000.0, "kiln": 500.0,
                                            "torch_bf16": 800.0}}, rss_mib=100,
                               peaks={"kiln_bf16": 1000.0, "kiln": 200.0, "torch_bf16": 1000.0},
                               flops=1e8)
        facts = {"date": "2026-12-06", "cpu": "Some Xeon (GenuineIntel family 6 model 143)",
                 "cpus": 2, "mem_gib": 24, "cpu_flags": ["amx_bf16", "amx_tile", "avx512_bf16"],
                 "busy_fraction": 0.0, "peaks_others": 0.0, "others_during": 0.0,
                 "noisy_runs": 0, "runs": 3, "noisy_retries": 1, "repeats": 1, "steps": 2,
                 "kiln_present": True, "torch_present": True, "kiln": "build/kiln (fake)",
                 "torch_bf16": "torch 1.13", "flops": ["flops_per_token, tiny: checked"]}
        peaks = {"sgemm": {1: 100.0, 2: 200.0}, "sgemm_facts": {},
                 "bf16": {1: 500.0, 2: 1000.0}, "bf16_facts": {2: {"isa": "avx512"}}}
        command = "bench/train/run --precision bf16 --quick"
        text = d.bf16_render(command, facts, peaks, items, results, [])
        lines = text.splitlines()
        self.assertEqual(lines[3], command)
        self.assertIn("host: Some Xeon (GenuineIntel family 6 model 143), 2 vCPUs", lines[6])
        self.assertIn("- bf16 units (lscpu's flags): amx_bf16 yes, avx512_bf16 yes: the AMX "
                      "goals apply", lines)
        self.assertIn("1 thread 500.0 GFLOP/s, 2 threads 1000.0 GFLOP/s (isa avx512); **the "
                      "bf16 sides' MFU (Kiln bf16, torch autocast) is tokens/s x "
                      "flops_per_token over this bf16 peak**", text)
        self.assertIn("- flops_per_token, tiny: checked", lines)
        header = next(x for x in lines if x.startswith("| model |"))
        self.assertIn("| Kiln bf16 MFU (bf16 peak) | Kiln fp32 tok/s | Kiln fp32 MFU (sgemm "
                      "peak) | torch autocast tok/s | torch autocast MFU (bf16 peak) |", header)
        # MFU: 2000 x 1e8 / 1e12, 500 x 1e8 / 2e11, 800 x 1e8 / 1e12.
        self.assertIn("| tiny | 8 x 256 | 2 | 2000 | 20.0% | 500 | 25.0% | 800 | 8.0% | 4.00x | "
                      "2.50x | 100 MiB | 100 MiB | 100 MiB |", lines)
        self.assertEqual(len(header.split("|")), len(lines[lines.index(header) + 2].split("|")))
        self.assertIn("- goal, gpt2-124m on this CPU (with amx_bf16): Kiln bf16 >= 3.0x Kiln "
                      "fp32, each at its better thread count: n/a (gpt2-124m is not in this "
                      "run)", lines)
        self.assertNotIn("## Failures", text)
        # torch autocast failed, on a CPU without bf16 units.
        results = fake_results({"tiny-t2": {"kiln_bf16": 2000.0, "kiln": 500.0,
                                            "torch_bf16": None}})
        text = d.bf16_render(command, dict(facts, cpu_flags=["avx512f"]), peaks, items, results,
                             ["torch_bf16 tiny-t2: exit 1: boom"])
        self.assertIn("| 2000 | - | 500 | - | failed | - | 4.00x | - | 100 MiB | 100 MiB | - |",
                      text)
        self.assertIn("amx_bf16 no, avx512_bf16 no: no bf16 goal applies", text)
        self.assertIn("the bf16 goals do not apply here", text)
        self.assertIn("## Failures\n\n- FAILED: torch_bf16 tiny-t2: exit 1: boom", text)
        # No tuned environment: torch autocast's cells say n/a.
        text = d.bf16_render(command, dict(facts, torch_present=False), peaks, items, results,
                             [])
        self.assertIn("| 2000 | - | 500 | - | n/a | - |", text)

    def test_learning_bf16_lines(self):
        d = self.driver
        curves = {"kiln": {50: 6.0, 100: 5.0}, "kiln_bf16": {50: 6.06, 100: 5.05},
                  "torch_bf16": {100: 4.9}}
        first = {"kiln": 10.9, "kiln_bf16": 10.91, "torch_bf16": 10.9}
        last = {s: c[100] for s, c in curves.items()}
        lines, within = d.learning_bf16_lines(curves, first, last)
        self.assertTrue(within)
        self.assertIn("| 50 | 6.0000 | 6.0600 | - | +1.000% | - | - |", lines)
        self.assertIn("| 100 | 5.0000 | 5.0500 | 4.9000 | +1.000% | -2.000% | -2.970% |", lines)
        self.assertIn("Kiln fp32 10.900000, Kiln bf16 10.910000 (+9.2e-04 relative)",
                      "\n".join(lines))
        self.assertIn("- last validation loss, Kiln bf16 against Kiln fp32 (the issue's "
                      "criterion): Kiln fp32 5.0000, Kiln bf16 5.0500: +1.000%, within 2%", lines)
        self.assertIn("- torch autocast's last validation loss: 4.9000: -2.000% from Kiln fp32, "
                      "-2.970% from Kiln bf16", lines)
        for value, text in ((5.11, "+2.200%, NOT within 2%"), (4.89, "-2.200%, NOT within 2%")):
            lines, within = d.learning_bf16_lines(curves, first, dict(last, kiln_bf16=value))
            self.assertFalse(within)
            self.assertIn(text, "\n".join(lines))
        lines, within = d.learning_bf16_lines(curves, dict(first, kiln_bf16=None),
                                              dict(last, kiln_bf16=None, torch_bf16=None))
        self.assertIsNone(within)
        self.assertIn("- last validation loss, Kiln bf16 against Kiln fp32: n/a (a side has "
                      "none)", lines)
        self.assertIn("- torch autocast's last validation loss: n/a", lines)
        self.assertFalse(any(x.startswith("- step 1") for x in lines))

    def test_ddp_figures_and_goals(self):
        d = self.driver
        self.assertEqual(d.checkpoint_steps(5), [2, 4, 5])
        argv = d.ddp_argv("kiln_ckpt", "/k", os.path.join(ROOT, "c.yaml"), 3, 40.0, "/tmp/x")
        self.assertEqual(argv, ["/k", "train", "c.yaml", "--nproc", "2", "--threads", "1",
                                "--batch", "8", "--seq", "256", "--max-steps", "3",
                                "--peak-gflops", "40.0", "--json", "--ckpt-dir", "/tmp/x",
                                "--ckpt-every", "2"])
        self.assertEqual(d.ddp_argv("torch_ddp", "/k", os.path.join(ROOT, "c.yaml"), 3, None)
                         [1:4], ["bench/train/torch_ddp.py", "c.yaml", "--nproc"])

        def sample(rates, step_ms, exposed, stalls, allreduce=None, done_exposed=None):
            lines = [{"step": i + 1, "tokens_per_s": r, "step_ms": m, "ckpt_stall_ms": c}
                     for i, (r, m, c) in enumerate(zip(rates, step_ms, stalls))]
            for line, e in zip(lines, exposed or []):
                line["comm_exposed_ms"] = e
            s = {"error": None, "steps": lines,
                 "done": {"allreduce_ms": allreduce, "exposed_allreduce_ms": done_exposed}}
            d.ddp_figures(s, len(lines))
            return s

        # Step 1 (rate 1, 100 ms exposed) is warm-up: the median of 1000, 900, 1100.
        k = sample([1, 1000, 900, 1100], [9, 2000, 2000, 2000], [100, 10, 20, 30], [0] * 4)
        self.assertEqual((k["tokens_per_s"], k["comm_exposed_ms"]), (1000, 20))
        # torch_ddp.py's step lines have no comm_exposed_ms: its done line's exposed figure.
        t = sample([1, 900, 950, 1000], [9, 1, 1, 1], None, [0] * 4, allreduce=80.0,
                   done_exposed=12.5)
        self.assertEqual(t["comm_exposed_ms"], 12.5)
        c = sample([1, 800, 800, 800], [9, 2000, 2000, 2000], [0] * 4, [0, 60, 0, 100])
        self.assertEqual(c["ckpt_stall_ms"], [60, 100])  # steps 2 and 4 checkpoint
        summary = d.ddp_summary({"kiln": [k], "torch_ddp": [t], "kiln_ckpt": [c]})
        self.assertEqual(summary["torch_ddp"]["allreduce_ms"], 80.0)
        self.assertEqual(summary["torch_ddp"]["comm_exposed_ms"], 12.5)
        self.assertAlmostEqual(summary["kiln_ckpt"]["ckpt_fraction"], 80 / 2000)
        lines = d.ddp_goal_lines(summary, True)
        self.assertIn("Kiln >= 1.05x torch DDP: met (1.05x)", lines[0])
        self.assertIn("<= 5% of the mean step: met (4.0%)", lines[1])
        self.assertEqual(len(d.ddp_goal_lines(summary, False)), 1)

    @unittest.skipUnless(os.path.isdir(SHARDS), "run scripts/fetch-data")
    def test_ddp_run_reaches_the_table(self):
        r, report = self.drive({}, "--ddp", "--ckpt", "--steps", "3", "--repeats", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        kiln, ckpt = report["sides"]["kiln"], report["sides"]["kiln_ckpt"]
        # Steps 2 and 3 of 2 x 2048 tokens take 3 s and 4 s: the median of their rates.
        rate = (2 * 2048 / 3.0 + 2 * 2048 / 4.0) / 2
        self.assertAlmostEqual(kiln["tokens_per_s"], rate)
        self.assertAlmostEqual(kiln["comm_exposed_ms"], 25.0)
        self.assertAlmostEqual(ckpt["ckpt_fraction"], 50.0 / 3500.0)
        torch_rate = report["sides"]["torch_ddp"]["tokens_per_s"]
        self.assertGreater(torch_rate, 0)
        self.assertGreater(report["sides"]["torch_ddp"]["allreduce_ms"], 0)
        self.assertIn(f"| {rate:.0f} | {torch_rate:.0f} | {rate / torch_rate:.2f}x |",
                      r.stdout)
        self.assertIn("<= 5% of the mean step: met (1.4%)", r.stdout)
        self.assertIn("--nproc 2 --threads 1 --batch 8 --seq 256 --max-steps 3",
                      kiln["runs"][0]["argv"])
        self.assertIn("--ckpt-every 2", ckpt["runs"][0]["argv"])

    def test_zero_figures(self):
        d = self.driver
        expected = 2 * 124439808 * 4 * 0.5
        self.assertEqual(d.zero_expected_bytes(124439808, 2), expected)

        def run(rss, maxrss_kib=None, error=None):
            return {"error": error, "done": {"peak_rss_bytes": rss}, "maxrss_kib": maxrss_kib}
        f = d.zero_figures({"plain DP": run(3000, 4), "ZeRO-1": run(1000, 2)}, 250)
        self.assertEqual(f["rank0"], (3000, 1000, 2000))
        self.assertEqual(f["largest"], (4096, 2048, 2048))
        self.assertEqual((f["expected"], f["agree"]), (1000, False))
        f = d.zero_figures({"plain DP": run(3000), "ZeRO-1": run(2000, error="boom")}, 250)
        self.assertEqual(f["rank0"], (3000, None, None))
        self.assertEqual(f["largest"], (None, None, None))
        self.assertIsNone(f["agree"])

    @unittest.skipUnless(os.path.isdir(SHARDS), "run scripts/fetch-data")
    def test_zero_rss_run_reaches_the_table(self):
        moments = 2 * 124439808 * 4 // 2  # what a ZeRO-1 rank of 2 no longer holds
        plain = 3 << 30
        r, report = self.drive({"FAKE_PEAK_RSS_ZERO0": str(plain),
                                "FAKE_PEAK_RSS_ZERO1": str(plain - moments)},
                               "--zero-rss", "--steps", "2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(report["figures"]["rank0"], [plain, plain - moments, moments])
        self.assertIn("| plain DP - ZeRO-1 | 497.8 MB |", r.stdout)
        self.assertIn("within 5%: as expected (1.000 of the moments)", r.stdout)
        for zero in ("0", "1"):
            self.assertIn("--nproc 2 --threads 1 --batch 1 --seq 64 --max-steps 2 "
                          f"--peak-gflops 100 --json --zero {zero}`", r.stdout)

    def test_missing_kiln_and_bad_flags(self):
        for flags in (["--ckpt"], ["--ddp", "--learning"], ["--zero-rss", "--ddp"],
                      ["--models", "nope"],
                      ["--repeats", "0"], ["--steps", "1"],
                      ["--threads", "3"], ["--timeout-s", "0"], ["--sides", "kiln,gpu"]):
            r = subprocess.run([RUN] + flags, capture_output=True, text=True,
                               timeout=CHILD_TIMEOUT_S)
            self.assertEqual(r.returncode, 2, flags)
        os.remove(self.kiln)
        r, _ = self.drive({}, "--learning", "--quick")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no binary at", r.stdout)


if __name__ == "__main__":
    unittest.main()
