#!/usr/bin/env python3
"""Tests of bench/lib/torch_env.py, what bench/ops/run and bench/train/run share.

  /usr/bin/python3 bench/lib/torch_env_test.py [-v]     (also run by bench/ops/run_test.py)

What the drivers rely on: a tuned torch that did not load the OpenMP OpenBLAS or tcmalloc (or
an untuned one that did) is caught; a hung or memory-hungry child is killed with its group;
the peak RSS is the child's own; a noisy run is rerun and the quieter one counts; the
interleaved order reverses the sides on every other repeat; a Kiln without the subcommand is
reported, not run. A few seconds, no torch import.
"""
import os
import stat
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_env  # noqa: E402


class GuardsTest(unittest.TestCase):
    LIB = "/x/openblas-openmp"

    def test_library_check(self):
        check = torch_env.check_torch_libraries
        good = {"blas": self.LIB + "/libopenblasp-r0.3.21.so", "blas_threading": "openmp",
                "tcmalloc": True}
        self.assertIsNone(check(good, True, self.LIB))
        system = {"blas": "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so",
                  "blas_threading": "pthread", "tcmalloc": True}
        self.assertIn("not the OpenMP OpenBLAS", check(system, True, self.LIB))
        self.assertIn("libtcmalloc", check(dict(good, tcmalloc=False), True, self.LIB))
        self.assertIn("no libopenblas", check({"tcmalloc": True}, True, self.LIB))
        self.assertIsNone(check(dict(system, tcmalloc=False), False, self.LIB))
        self.assertIn("OpenMP", check(dict(good, tcmalloc=False), False, self.LIB))
        self.assertIn("libtcmalloc", check(system, False, self.LIB))

    def test_hung_child_is_killed(self):
        start = time.monotonic()
        r = torch_env.run_child([sys.executable, "-c", "import time; time.sleep(60)"], 1)
        self.assertTrue(r["timed_out"])
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("hung", torch_env.failure("x", r, 1))

    def test_memory_hungry_child_is_killed(self):
        grow = "b = []\nwhile True: b.append(bytearray(1 << 24))"  # 16 MiB at a time, touched
        r = torch_env.run_child([sys.executable, "-c", grow], 60, rss_cap_kib=256 * 1024,
                                poll_s=torch_env.MEMORY_POLL_S)
        self.assertTrue(r["over_memory"])
        self.assertGreaterEqual(r["maxrss_kib"], 256 * 1024)
        self.assertLess(r["maxrss_kib"], 1 << 20)  # stopped long before 1 GiB

    def test_peak_rss_is_the_childs_own(self):
        size_mib = 300
        r = torch_env.run_child([sys.executable, "-c", f"b = bytearray({size_mib} << 20)"], 60)
        self.assertEqual(r["rc"], 0)
        self.assertGreater(r["maxrss_kib"], size_mib * 1024)
        self.assertLess(r["maxrss_kib"], (size_mib + 100) * 1024)


class HelpersTest(unittest.TestCase):
    def test_interleaved_reverses_every_other_repeat(self):
        order = list(torch_env.interleaved(3, ["a", "b"], lambda item: ["x", item]))
        self.assertEqual(order, [(0, "a", "x"), (0, "a", "a"), (0, "b", "x"), (0, "b", "b"),
                                 (1, "a", "a"), (1, "a", "x"), (1, "b", "b"), (1, "b", "x"),
                                 (2, "a", "x"), (2, "a", "a"), (2, "b", "x"), (2, "b", "b")])

    def test_noisy_run_is_rerun_and_the_quieter_counts(self):
        runs = iter([{"error": None, "others": 0.9, "n": 1}, {"error": None, "others": 0.5,
                     "n": 2}, {"error": None, "others": 0.7, "n": 3}])
        saved = torch_env.NOISY_WAIT_S
        torch_env.NOISY_WAIT_S = 0  # no waiting for quiet in a test
        try:
            sample = torch_env.run_quietly(lambda: next(runs), 2)
        finally:
            torch_env.NOISY_WAIT_S = saved
        self.assertEqual(sample["n"], 2)
        quiet = iter([{"error": None, "others": 0.1, "n": 1}])
        self.assertEqual(torch_env.run_quietly(lambda: next(quiet), 2)["n"], 1)

    def test_json_lines(self):
        text = 'noise\n{"a": 1}\n{broken\n[1]\n{"b": 2}\n'
        self.assertEqual(torch_env.json_lines(text), [{"a": 1}, {"b": 2}])
        self.assertEqual(torch_env.json_line(text), {"b": 2})

    def test_probe_kiln_needs_the_subcommand_as_a_word(self):
        with tempfile.TemporaryDirectory(prefix="torch-env-test-") as tmp:
            kiln = os.path.join(tmp, "kiln")
            with open(kiln, "w", encoding="utf-8") as fh:
                fh.write("#!/bin/sh\necho 'Subcommands:\n  ops-bench  times one op\n"
                         "  version    the trainer is not here'\n")
            os.chmod(kiln, os.stat(kiln).st_mode | stat.S_IXUSR)
            self.assertEqual(torch_env.probe_kiln(kiln, "ops-bench"), (True, None))
            present, why = torch_env.probe_kiln(kiln, "train")
            self.assertFalse(present)
            self.assertIn("no train subcommand", why)
            present, why = torch_env.probe_kiln(os.path.join(tmp, "missing"), "train")
            self.assertIn("no binary", why)

    def test_torch_env_kinds(self):
        tuned = torch_env.torch_env(True, "/lib/omp", "/lib/tc.so", 1)
        self.assertEqual(tuned["OMP_NUM_THREADS"], "1")
        self.assertEqual(tuned["LD_PRELOAD"], "/lib/tc.so")
        self.assertTrue(tuned["LD_LIBRARY_PATH"].startswith("/lib/omp"))
        untuned = torch_env.torch_env(False, "/lib/omp", "/lib/tc.so", 2)
        self.assertEqual(untuned["OMP_NUM_THREADS"], "2")
        self.assertNotIn("LD_PRELOAD", untuned)

    def test_blas_facts_of_this_process(self):
        facts = torch_env.blas_facts()
        self.assertEqual(set(facts), {"blas", "blas_threading", "tcmalloc"})
        self.assertIs(facts["tcmalloc"], "LD_PRELOAD" in os.environ and "tcmalloc" in
                      os.environ["LD_PRELOAD"])


if __name__ == "__main__":
    unittest.main()
