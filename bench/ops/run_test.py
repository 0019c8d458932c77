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
import json
import os
import subprocess
import sys
import tempfile
import unittest

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


# The fake `kiln`'s ops-bench: a line whose ms is FAKE_KILN_MS (bench/lib/driver_testing.py
# answers --help and version, and fails with "ops-bench: kernel exploded" under FAKE_KILN_FAIL).
FAKE_OPS_BENCH = """\
    flags = dict(zip(args[1::2], args[2::2]))
    shape = dict(kv.split("=") for kv in flags["--shape"].split(","))
    if flags["--op"] == "attention":
        # Memory: hold T*T*4 bytes per the fake, so the difference is visible.
        held = bytearray(int(shape["T"]) ** 2 * 4 // 16)
    print(json.dumps({"op": flags["--op"], "shape": flags["--shape"], "pass": "fwd",
                      "threads": 2, "isa": "fake", "iters": 1,
                      "ms": float(os.environ["FAKE_KILN_MS"]), "flops": 0, "gflops": 0,
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
        env = dict(os.environ, KILN=self.kiln, FAKE_KILN_MS="2.0", **extra_env)
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

    def test_bad_flags_exit_2(self):
        for flags in (["--cases", "nope"], ["--repeats", "0"], ["--timeout-s", "0"]):
            r = subprocess.run([RUN] + flags, capture_output=True, text=True,
                               timeout=CHILD_TIMEOUT_S)
            self.assertEqual(r.returncode, 2, flags)


if __name__ == "__main__":
    unittest.main()
