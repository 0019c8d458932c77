#!/usr/bin/env python3
"""Tests of bench/ops: the shared counts, the torch harness, the driver's guards and its Kiln
path (through a fake `kiln` that prints ops-bench lines, since the real one may not exist).

  /usr/bin/python3 bench/ops/run_test.py [-v]

What users rely on: the counts are the brief's formulas; torch_ops_bench prints every field
with gflops/gbps consistent with ms; a tuned torch that did not load the OpenMP OpenBLAS or
tcmalloc is caught; a hung or memory-hungry child is killed; Kiln's medians, ratios and
failures reach the table, results.json and the exit status. The driver tests measure the
peaks, so the whole file takes about a minute.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import driver_testing  # noqa: E402
import op_counts  # noqa: E402
import torch_env  # noqa: E402
# bench/lib's tests (the guards and helpers this driver relies on) run with this file's.
from torch_env_test import GuardsTest, HelpersTest  # noqa: E402,F401

RUN = os.path.join(HERE, "run")
TORCH_BENCH = os.path.join(HERE, "torch_ops_bench.py")
TORCH_PYTHON = "/usr/bin/python3"
CHILD_TIMEOUT_S = 300  # a driver run with the peaks takes under a minute


driver = driver_testing.load_script(RUN, "ops_run")


def parse_fails(parse, argv):
    """Whether parse(argv) exits 2, argparse's way of refusing flags (its message muted)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            parse(argv)
        except SystemExit as e:
            return e.code == 2
    return False


class CountsTest(unittest.TestCase):
    def test_brief_formulas(self):
        c = op_counts.counts
        attn = {"B": 1, "H": 12, "T": 1024, "D": 64}
        fwd = 4 * 1 * 12 * 1024 * 1024 * 64
        self.assertEqual(c("attention", attn, "fwd"), (fwd, 0))
        self.assertEqual(c("attention", attn, "fwdbwd"), (fwd * 3.5, 0))
        self.assertEqual(c("attention", attn, "fwdbwd", causal=True), (fwd * 3.5 / 2, 0))
        self.assertEqual(c("attention", attn, "fwd", causal=True), (fwd / 2, 0))
        mm = {"M": 2048, "N": 768, "K": 768}
        self.assertEqual(c("matmul", mm, "fwd"), (2 * 2048 * 768 * 768, 0))
        self.assertEqual(c("matmul", mm, "fwdbwd"), (6 * 2048 * 768 * 768, 0))
        ln = {"N": 2048, "C": 768}
        self.assertEqual(c("layernorm", ln, "fwd"), (0, 8 * 2048 * 768))
        self.assertEqual(c("layernorm", ln, "fwdbwd"), (0, 20 * 2048 * 768))
        self.assertEqual(c("gelu", {"N": 100}, "fwd"), (0, 800))
        self.assertEqual(c("gelu", {"N": 100}, "fwdbwd"), (0, 2000))
        ce = {"N": 2048, "V": 50304}
        self.assertEqual(c("cross_entropy", ce, "fwd"), (0, 4 * 2048 * 50304))
        self.assertEqual(c("cross_entropy", ce, "fwdbwd"), (0, 12 * 2048 * 50304))
        self.assertEqual(c("adamw", {"N": 16777216}, "fwd"), (0, 28 * 16777216))

    def test_shape_syntax(self):
        self.assertEqual(op_counts.parse_shape("matmul", "M=2,N=3,K=4"),
                         {"M": 2, "N": 3, "K": 4})
        self.assertEqual(op_counts.format_shape("matmul", {"K": 4, "M": 2, "N": 3}),
                         "M=2,N=3,K=4")
        for bad in ("M=2,N=3", "M=2,N=3,K=4,X=1", "M=2,N=3,K=0", "M=2,N=3,K=x", "M=2,M=2,N=3",
                    "M2,N=3,K=4", "M=-1,N=3,K=4"):
            with self.assertRaises(op_counts.ShapeError, msg=bad):
                op_counts.parse_shape("matmul", bad)

    def test_driver_cases_use_the_shared_counts(self):
        for case in driver.CASES:
            self.assertEqual((case.flops, case.bytes),
                             op_counts.counts(case.op, case.shape, case.pass_ or "fwd",
                                              case.causal))
            self.assertTrue(case.flops or case.bytes, case.name)


class TorchBenchTest(unittest.TestCase):
    SMALL = {"matmul": "M=64,N=32,K=16", "attention": "B=1,H=2,T=64,D=16",
             "layernorm": "N=64,C=32", "gelu": "N=4096", "cross_entropy": "N=16,V=100",
             "adamw": "N=4096"}

    def run_torch(self, args, env=None):
        return subprocess.run([TORCH_PYTHON, TORCH_BENCH] + args, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S, env=env)

    def test_every_op_and_pass_prints_consistent_json(self):
        for op, shape in self.SMALL.items():
            for pass_ in ("fwd", "fwdbwd"):
                causal = ["--causal"] if op == "attention" else []
                r = self.run_torch(["--op", op, "--shape", shape, "--pass", pass_, "--threads",
                                    "2", "--iters", "3", "--warmup", "1", "--json"] + causal)
                self.assertEqual(r.returncode, 0, r.stderr)
                line = json.loads(r.stdout.strip().splitlines()[-1])
                for key in ("op", "shape", "pass", "threads", "isa", "iters", "ms", "flops",
                            "gflops", "bytes", "gbps", "blas", "tcmalloc"):
                    self.assertIn(key, line)
                self.assertEqual(line["isa"], "torch")
                self.assertEqual(line["pass"], "step" if op == "adamw" else pass_)
                flops, nbytes = op_counts.counts(op, op_counts.parse_shape(op, shape), pass_,
                                                 op == "attention")
                self.assertEqual((line["flops"], line["bytes"]), (flops, nbytes))
                self.assertGreater(line["ms"], 0)
                self.assertAlmostEqual(line["gflops"], flops / line["ms"] / 1e6)
                self.assertAlmostEqual(line["gbps"], nbytes / line["ms"] / 1e6)
                self.assertEqual(line["torch_threads"], 2)

    def test_bad_flags_exit_2(self):
        for args in (["--op", "gelu", "--shape", "N=0", "--threads", "2"],
                     ["--op", "gelu", "--shape", "N=4", "--threads", "0"],
                     ["--op", "gelu", "--shape", "N=4", "--threads", "2", "--causal"]):
            self.assertEqual(self.run_torch(args).returncode, 2, args)

    def test_reports_the_libraries_it_mapped(self):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        r = self.run_torch(["--op", "gelu", "--shape", "N=64", "--threads", "1", "--iters", "1",
                            "--json"], env=env)
        line = json.loads(r.stdout)
        self.assertIs(line["tcmalloc"], False)
        self.assertIn("libopenblas", line["blas"])
        env["LD_PRELOAD"] = torch_env.tcmalloc_path()
        r = self.run_torch(["--op", "gelu", "--shape", "N=64", "--threads", "1", "--iters", "1",
                            "--json"], env=env)
        self.assertIs(json.loads(r.stdout)["tcmalloc"], True)


class TorchBenchDtypeTest(unittest.TestCase):
    """torch_ops_bench.py --dtype: parsing, the bf16 line, the math path's correctness."""

    @classmethod
    def setUpClass(cls):
        cls.bench = driver_testing.load_script(TORCH_BENCH, "torch_ops_bench")  # imports torch

    def test_dtype_parsing(self):
        parse = self.bench.parse_args
        base = ["--op", "matmul", "--shape", "M=2,N=3,K=4", "--threads", "1"]
        self.assertEqual(parse(base).dtype, "f32")
        self.assertEqual(parse(base + ["--dtype", "bf16"]).dtype, "bf16")
        self.assertEqual(parse(["--op", "attention", "--shape", "B=1,H=1,T=4,D=2", "--causal",
                                "--threads", "1", "--dtype", "bf16"]).dtype, "bf16")
        self.assertEqual(parse(["--op", "gelu", "--shape", "N=4", "--threads", "1", "--dtype",
                                "f32"]).dtype, "f32")
        for bad in (base + ["--dtype", "fp16"], base + ["--dtype", "fp32"],
                    ["--op", "gelu", "--shape", "N=4", "--threads", "1", "--dtype", "bf16"],
                    ["--op", "adamw", "--shape", "N=4", "--threads", "1", "--dtype", "bf16"]):
            self.assertTrue(parse_fails(parse, bad), bad)

    def test_bf16_lines(self):
        for op, shape, causal in (("matmul", "M=64,N=32,K=16", []),
                                  ("attention", "B=1,H=2,T=64,D=16", ["--causal"]),
                                  ("attention", "B=1,H=2,T=64,D=16", [])):
            for pass_ in ("fwd", "fwdbwd"):
                r = subprocess.run([TORCH_PYTHON, TORCH_BENCH, "--op", op, "--shape", shape,
                                    "--pass", pass_, "--dtype", "bf16", "--threads", "2",
                                    "--iters", "2", "--warmup", "1", "--json"] + causal,
                                   capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
                self.assertEqual(r.returncode, 0, r.stderr)
                line = json.loads(r.stdout.strip().splitlines()[-1])
                self.assertEqual(line["dtype"], "bf16")
                self.assertEqual(line["pass"], pass_)
                self.assertEqual(line["flops"], op_counts.counts(
                    op, op_counts.parse_shape(op, shape), pass_, bool(causal))[0])

    def test_math_attention_is_attention(self):
        torch = self.bench.torch
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(2, 3, 17, 8, generator=g) for _ in range(3))
        for causal in (False, True):
            want = torch.nn.functional._scaled_dot_product_attention(q, k, v,
                                                                     is_causal=causal)[0]
            mask = self.bench.causal_mask(17) if causal else None
            got = self.bench.math_attention(q, k, v, mask)
            self.assertTrue(torch.allclose(got, want, atol=1e-5), causal)
            got16 = self.bench.math_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
            self.assertEqual(got16.dtype, torch.bfloat16)
            self.assertTrue(torch.allclose(got16.float(), want, atol=0.05), causal)


class Bf16DriverPartsTest(unittest.TestCase):
    """The driver's --dtype bf16 parts that need no run: flags, command lines, the table."""

    def test_parse_dtype(self):
        args = driver.parse_args([])
        self.assertEqual(args.dtype, "f32")
        self.assertEqual(args.case_list, driver.CASE_NAMES)
        self.assertEqual(args.out, driver.RESULTS_DEFAULT)
        args = driver.parse_args(["--dtype", "bf16"])
        self.assertEqual(args.case_list, ["attention-fwdbwd", "attention-fwd", "matmul-fwd",
                                          "matmul-fwdbwd"])
        self.assertEqual(args.out, driver.RESULTS_BF16_DEFAULT)
        self.assertNotEqual(driver.RESULTS_BF16_DEFAULT, driver.RESULTS_DEFAULT)
        args = driver.parse_args(["--dtype", "bf16", "--cases", "matmul-fwd", "--out", "x.json"])
        self.assertEqual((args.case_list, args.out), (["matmul-fwd"], "x.json"))
        for bad in (["--dtype", "bf16", "--cases", "gelu-fwd"],
                    ["--dtype", "bf16", "--cases", "matmul-fwd,adamw"],
                    ["--dtype", "fp16"], ["--dtype", "bf16", "--cases", "nope"]):
            self.assertTrue(parse_fails(driver.parse_args, bad), bad)

    def test_command_lines(self):
        case = next(c for c in driver.CASES if c.name == "attention-fwdbwd")
        tail = ["--threads", "2", "--iters", str(case.iters), "--warmup", str(case.warmup),
                "--json"]
        head = ["--op", "attention", "--shape", "B=1,H=12,T=1024,D=64", "--causal", "--pass",
                "fwdbwd"]
        # fp32 mode: the command lines as they were, no --dtype.
        self.assertEqual(driver.side_argv("kiln", case, "/k"), ["/k", "ops-bench"] + head + tail)
        for side in ("torch", "torch_untuned"):
            self.assertEqual(driver.side_argv(side, case, "/k"),
                             [driver.TORCH_PYTHON, driver.TORCH_BENCH] + head + tail)
        self.assertEqual(driver.side_argv("kiln_bf16", case, "/k", "bf16"),
                         ["/k", "ops-bench"] + head + ["--dtype", "bf16"] + tail)
        self.assertEqual(driver.side_argv("kiln", case, "/k", "bf16"),
                         ["/k", "ops-bench"] + head + ["--dtype", "f32"] + tail)
        self.assertEqual(driver.side_argv("torch_bf16", case, "/k", "bf16"),
                         [driver.TORCH_PYTHON, driver.TORCH_BENCH] + head +
                         ["--dtype", "bf16"] + tail)
        mm = next(c for c in driver.CASES if c.name == "matmul-fwd")
        self.assertEqual(driver.side_argv("torch_bf16", mm, "/k", "bf16")[2:],
                         ["--op", "matmul", "--shape", "M=2048,N=768,K=768", "--pass", "fwd",
                          "--dtype", "bf16", "--threads", "2", "--iters", str(mm.iters),
                          "--warmup", str(mm.warmup), "--json"])

    @staticmethod
    def side(ms, failed=0):
        return {"median_ms": ms, "failed": failed, "samples_ms": [ms], "runs": []}

    def facts(self, **over):
        facts = {"date": "2025-01-01T00:00:00+00:00", "cpu": "Fake CPU (GenuineIntel)",
                 "cpus": 2, "mem_gib": 24.0, "busy_fraction": 0.0, "peaks_others": 0.0,
                 "others_during": 0.0, "repeats": 1, "noisy_retries": 0, "runs": 6,
                 "noisy_runs": 0, "kiln_present": True, "kiln": "kiln (fake)",
                 "torch_tuned": "torch 1.13 (fake)", "dtype": "bf16",
                 "cpu_flags": ["amx_bf16", "amx_tile", "avx512_bf16"]}
        facts.update(over)
        return facts

    def render(self, results, **facts):
        peaks = {"sgemm": {1: 100.0, 2: 200.0}, "triad": {1: 20.0, 2: 34.0}, "sgemm_facts": {}}
        return driver.render("bench/ops/run --dtype bf16", self.facts(**facts), peaks, results,
                             None, ["sanity line"], [], [])

    def test_table(self):
        fwdbwd = next(c for c in driver.CASES if c.name == "attention-fwdbwd")
        mm = next(c for c in driver.CASES if c.name == "matmul-fwd")
        results = {
            "attention-fwdbwd": {"kiln_bf16": self.side(50.0), "kiln": self.side(100.0),
                                 "torch_bf16": self.side(200.0)},
            "matmul-fwd": {"kiln_bf16": self.side(4.0), "kiln": self.side(None, failed=1),
                           "torch_bf16": self.side(16.0)},
        }
        text = self.render(results)
        self.assertTrue(text.startswith("# bench/ops --dtype bf16"))
        self.assertIn("bench/ops/run --dtype bf16", text)
        self.assertIn("Fake CPU (GenuineIntel)", text)
        self.assertIn("amx_bf16 yes, avx512_bf16 yes", text)
        self.assertIn("memory check: skipped", text)
        self.assertIn("| case | pass | Kiln bf16 ms | Kiln bf16 | Kiln fp32 ms | Kiln fp32 | "
                      "torch bf16 ms | torch bf16 | Kiln bf16 / Kiln fp32 | "
                      "Kiln bf16 / torch bf16 |", text)
        g = [fwdbwd.flops / ms / 1e6 for ms in (50.0, 100.0, 200.0)]
        self.assertIn(f"| {fwdbwd.label} | fwdbwd | 50.000 | {g[0]:.1f} GFLOP/s | 100.000 | "
                      f"{g[1]:.1f} GFLOP/s | 200.000 | {g[2]:.1f} GFLOP/s | 2.00 | 4.00 |", text)
        g = [mm.flops / ms / 1e6 for ms in (4.0, 16.0)]
        self.assertIn(f"| {mm.label} | fwd | 4.000 | {g[0]:.1f} GFLOP/s | failed | n/a | "
                      f"16.000 | {g[1]:.1f} GFLOP/s | n/a | 4.00 |", text)
        self.assertNotIn("torch untuned", text)
        self.assertNotIn("Kiln / peak", text)

    def test_table_without_kiln_or_bf16_units(self):
        results = {"matmul-fwd": {"kiln_bf16": self.side(None), "kiln": self.side(None),
                                  "torch_bf16": self.side(16.0)}}
        text = self.render(results, kiln_present=False, kiln="n/a (no binary at x)",
                           cpu_flags=[])
        self.assertIn("amx_bf16 no, avx512_bf16 no", text)
        row = next(line for line in text.splitlines() if line.startswith("| matmul"))
        self.assertTrue(row.startswith("| matmul M=2048 N=768 K=768 | fwd | n/a | n/a | n/a | "
                                       "n/a | 16.000 |"), row)
        self.assertTrue(row.endswith("| n/a | n/a |"), row)

    def test_sanity_lines_of_a_bf16_run(self):
        peaks = {"sgemm": {1: 100.0, 2: 200.0}, "triad": {1: 20.0, 2: 34.0}}
        results = {"attention-fwdbwd": {"kiln_bf16": self.side(1.0), "kiln": self.side(2.0),
                                        "torch_bf16": self.side(3.0)}}
        lines = driver.sanity_lines(peaks, results, None)
        self.assertEqual(len(lines), 4)  # sgemm and triad; the torch references are fp32's


# The fake `kiln`'s ops-bench: a line whose ms is FAKE_KILN_MS (bench/lib/driver_testing.py
# answers --help and version, and fails with "ops-bench: kernel exploded" under FAKE_KILN_FAIL).
FAKE_OPS_BENCH = """\
    flags = dict(zip(args[1::2], args[2::2]))
    shape = dict(kv.split("=") for kv in flags["--shape"].split(","))
    if flags["--op"] == "attention":
        # Memory: hold T*T*4 bytes per the fake, so the difference is visible.
        held = bytearray(int(shape["T"]) ** 2 * 4 // 16)
    # The dtype it was asked for (FAKE_KILN_DTYPE: a kiln that says another); bf16 runs take
    # FAKE_KILN_BF16_MS.
    dtype = os.environ.get("FAKE_KILN_DTYPE", flags.get("--dtype", "f32"))
    ms = os.environ["FAKE_KILN_BF16_MS" if flags.get("--dtype") == "bf16" else "FAKE_KILN_MS"]
    print(json.dumps({"op": flags["--op"], "shape": flags["--shape"], "pass": "fwd",
                      "threads": 2, "isa": "fake", "dtype": dtype, "iters": 1,
                      "ms": float(ms), "flops": 0, "gflops": 0,
                      "bytes": 12345, "gbps": 0}))
    """


class DriverTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ops-run-test-")
        self.kiln = driver_testing.write_fake_kiln(
            self.tmp.name, ["version", "comm-bench", "ops-bench"], "kiln fake-1.0",
            "ops-bench: kernel exploded", FAKE_OPS_BENCH)
        self.out = os.path.join(self.tmp.name, "results.json")

    def tearDown(self):
        self.tmp.cleanup()

    def drive(self, extra_env, *flags):
        env = dict(os.environ, KILN=self.kiln, FAKE_KILN_MS="2.0", FAKE_KILN_BF16_MS="0.5",
                   **extra_env)
        r = subprocess.run([RUN, "--repeats", "1", "--quiet-wait-s", "0", "--noisy-retries", "0",
                            "--out", self.out, *flags], capture_output=True, text=True, env=env,
                           timeout=CHILD_TIMEOUT_S)
        with open(self.out, encoding="utf-8") as fh:
            return r, json.load(fh)

    def test_kiln_figures_reach_the_table(self):
        r, report = self.drive({}, "--cases", "gelu-fwd", "--no-memory")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        sides = report["cases"]["gelu-fwd"]["sides"]
        self.assertEqual(sides["kiln"]["median_ms"], 2.0)
        torch_ms = sides["torch"]["median_ms"]
        self.assertGreater(torch_ms, 0)
        self.assertEqual(sides["torch_untuned"]["samples_ms"], [])  # only attention runs it
        self.assertIn(f"| {torch_ms / 2.0:.2f} | - |", r.stdout)
        gbps = report["cases"]["gelu-fwd"]["bytes"] / 2.0 / 1e6
        self.assertIn(f"| 2.000 | {gbps:.2f} GB/s |", r.stdout)
        self.assertIn("reports bytes 12345", r.stdout)  # the fake's wrong count is named
        self.assertIn("kiln fake-1.0", r.stdout)
        self.assertTrue(r.stdout.startswith("# bench/ops"))
        self.assertIn("bench/ops/run --repeats 1", r.stdout.splitlines()[3])
        self.assertGreater(report["peaks"]["sgemm"]["2"], 0)
        self.assertGreater(report["peaks"]["triad"]["2"], 0)

    def test_kiln_failure_fails_the_run(self):
        r, report = self.drive({"FAKE_KILN_FAIL": "1"}, "--cases", "gelu-fwd", "--no-memory")
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED: kiln gelu-fwd: exit 3: ops-bench: kernel exploded", r.stdout)
        self.assertIsNone(report["cases"]["gelu-fwd"]["sides"]["kiln"]["median_ms"])

    def test_missing_kiln_is_na_not_failure(self):
        os.remove(self.kiln)
        r, report = self.drive({}, "--cases", "layernorm-fwd", "--no-memory")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("n/a (no binary at", r.stdout)
        self.assertEqual(report["cases"]["layernorm-fwd"]["sides"]["kiln"]["samples_ms"], [])

    def test_memory_check(self):
        r, report = self.drive({}, "--cases", "layernorm-fwd")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        mem = report["memory"]
        small, large = mem["kiln"]["4096"], mem["kiln"]["16384"]
        # The fake holds T*T*4/16 bytes: 4 MiB at T=4096, 64 MiB at 16384; the interpreter's
        # own peak varies by a few MiB (freed start-up memory is reused).
        grown_kib = large["maxrss_kib"] - small["maxrss_kib"]
        self.assertGreater(grown_kib, 52 * 1024)
        self.assertLess(grown_kib, 68 * 1024)
        self.assertIn("| 4096 | 64 MiB | 512 MiB |", r.stdout)
        self.assertIn("| 16384 | 1.00 GiB | 8.00 GiB |", r.stdout)
        torch_small = mem["torch"]["4096"]
        self.assertIsNone(torch_small["error"])
        self.assertGreater(torch_small["maxrss_kib"], 512 * 1024)  # the (1,8,T,T) scores alone
        self.assertIn("skipped", mem["torch"]["16384"].get("skipped", "ran"))

    def test_bf16_sides_reach_the_table(self):
        r, report = self.drive({}, "--dtype", "bf16", "--cases", "matmul-fwd")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(report["dtype"], "bf16")
        self.assertIsNone(report["memory"])
        sides = report["cases"]["matmul-fwd"]["sides"]
        self.assertEqual(set(sides), {"kiln_bf16", "kiln", "torch_bf16"})
        self.assertEqual(sides["kiln_bf16"]["median_ms"], 0.5)
        self.assertEqual(sides["kiln"]["median_ms"], 2.0)
        self.assertIn("--dtype bf16", sides["kiln_bf16"]["runs"][0]["argv"])
        self.assertIn("--dtype f32", sides["kiln"]["runs"][0]["argv"])
        torch_run = sides["torch_bf16"]["runs"][0]
        self.assertEqual(torch_run["line"]["dtype"], "bf16")
        self.assertIs(torch_run["line"]["tcmalloc"], True)  # the tuned environment
        torch_ms = sides["torch_bf16"]["median_ms"]
        self.assertIn(f"| 4.00 | {torch_ms / 0.5:.2f} |", r.stdout)
        self.assertIn("memory check: skipped", r.stdout)
        self.assertIn("amx_bf16", r.stdout)

    def test_a_kiln_that_ignores_dtype_fails(self):
        case = next(c for c in driver.CASES if c.name == "matmul-fwd")
        with mock.patch.dict(os.environ, {"FAKE_KILN_MS": "2.0", "FAKE_KILN_BF16_MS": "0.5",
                                          "FAKE_KILN_DTYPE": "f32"}):
            sample = driver.run_side("kiln_bf16", case, self.kiln, None, None, 60,
                                     torch_env.CpuAccount(), "bf16")
            self.assertIn("asked for --dtype bf16, its JSON line says dtype 'f32'",
                          sample["error"])
            self.assertIsNone(sample["ms"])
            sample = driver.run_side("kiln", case, self.kiln, None, None, 60,
                                     torch_env.CpuAccount(), "bf16")
            self.assertIsNone(sample["error"])
            self.assertEqual(sample["ms"], 2.0)
            # fp32 mode asks for no dtype and checks none (a kiln without --dtype still works)
            with mock.patch.dict(os.environ, {"FAKE_KILN_DTYPE": "whatever"}):
                sample = driver.run_side("kiln", case, self.kiln, None, None, 60,
                                         torch_env.CpuAccount())
            self.assertIsNone(sample["error"])
            self.assertNotIn("--dtype", sample["argv"])

    def test_bad_flags_exit_2(self):
        for flags in (["--cases", "nope"], ["--repeats", "0"], ["--timeout-s", "0"],
                      ["--dtype", "bf16", "--cases", "gelu-fwd"], ["--dtype", "fp16"]):
            r = subprocess.run([RUN] + flags, capture_output=True, text=True,
                               timeout=CHILD_TIMEOUT_S)
            self.assertEqual(r.returncode, 2, flags)


if __name__ == "__main__":
    unittest.main()
