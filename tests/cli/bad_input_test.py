"""Runtime inputs that used to crash, exhaust the machine, run for ever or fail late: each is now
a clear error, early, with a non-zero exit (issue 10, item 11).

Every subprocess here has a timeout, and every loop a bound.
"""
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, SOURCE_DIR, Agent, run_kiln  # noqa: E402

ENCODER = os.path.join(SOURCE_DIR, "data", "gpt2", "encoder.json")


def run_measured(args, stdin_bytes, timeout=120, preexec_fn=None):
    """Runs `args` with `stdin_bytes`; returns (exit code, stdout bytes, stderr text, peak RSS in
    bytes) of that one child, measured by wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryFile() as inp:
        inp.write(stdin_bytes)
        inp.seek(0)
        proc = subprocess.Popen(args, stdin=inp, stdout=out, stderr=err, cwd=SOURCE_DIR,
                                preexec_fn=preexec_fn)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise AssertionError(f"{args} ran over {timeout} s")
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read().decode("utf-8", "replace"), \
            usage.ru_maxrss * 1024


class EncodeMemoryTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(ENCODER):
            self.fail(f"{ENCODER} is missing: run scripts/fetch-data")

    def test_one_long_word_takes_memory_linear_in_its_size(self):
        # 10 MB of letters with no space: one pre-split piece. Merging it whole took 587 MB
        # (58 bytes per byte); 300 MB ended in bad_alloc at 5.4 GB.
        rng = random.Random(7)
        word = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=10 << 20))
        data = word.encode()
        rc, out, err, rss = run_measured([KILN_BIN, "encode"], data)
        self.assertEqual(rc, 0, err)
        ids = json.loads(out)
        self.assertGreater(len(ids), len(data) // 10)
        self.assertLess(rss, 20 * len(data), f"peak RSS {rss >> 20} MiB for {len(data) >> 20} MiB")
        # It still decodes to itself.
        r = subprocess.run([KILN_BIN, "decode"], input=out, capture_output=True, cwd=SOURCE_DIR,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, data)

    def test_normal_words_are_unchanged(self):
        r = subprocess.run([KILN_BIN, "encode"], input=b"Hello world", capture_output=True,
                           cwd=SOURCE_DIR, timeout=60)
        self.assertEqual(json.loads(r.stdout), [15496, 995])


class ThreadLimitTest(unittest.TestCase):
    def test_threads_that_cannot_start_are_an_error_not_terminate(self):
        # glibc gives each thread a stack of RLIMIT_STACK: 1 GiB stacks under a 12 GiB address
        # space leave room for a few threads, not 300.
        def limit():
            resource.setrlimit(resource.RLIMIT_STACK, (1 << 30, 1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))

        rc, _, err, _ = run_measured(
            [KILN_BIN, "ops-bench", "--op", "gelu", "--shape", "N=1024", "--threads", "300",
             "--iters", "1", "--warmup", "0"], b"", timeout=60, preexec_fn=limit)
        self.assertEqual(rc, 1, err)
        self.assertNotIn("terminate called", err)
        self.assertIn("--threads", err)
        self.assertIn("cannot start thread", err)


class AgentFlagsTest(unittest.TestCase):
    def test_duration_that_is_not_a_finite_number_is_refused(self):
        for value in ["nan", "inf", "-1", "1e300"]:
            r = run_kiln("agent", "--metrics-port", "0", "--duration-s", value, timeout=20)
            self.assertEqual(r.returncode, 2, (value, r.stderr))
            self.assertIn("--duration-s", r.stderr)

    def test_the_process_keeps_its_name_after_the_re_exec(self):
        with Agent("--duration-s", "20") as agent:
            with open(f"/proc/{agent.proc.pid}/comm") as f:
                self.assertEqual(f.read().strip(), os.path.basename(KILN_BIN)[:15])
            self.assertEqual(agent.stop(), 0)


class LogFileTest(unittest.TestCase):
    def test_a_missing_directory_is_an_error_and_not_created(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, "no", "such")
            r = run_kiln("--log-file", os.path.join(missing, "x.log"), "agent", "--metrics-port",
                         "0", "--duration-s", "0.1", timeout=20)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("does not exist", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "no")))

    def test_a_log_that_cannot_be_written_fails_the_run(self):
        r = run_kiln("--log-file", "/dev/full", "agent", "--metrics-port", "0", "--duration-s",
                     "0.1", timeout=20)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("/dev/full", r.stderr)
        self.assertIn("log lines were lost", r.stderr)


class UnknownCommandTest(unittest.TestCase):
    def test_an_unknown_command_is_named_with_the_list(self):
        r = run_kiln("--log-level", "info", "frobnicate", "--x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'frobnicate'", r.stderr)
        self.assertIn("train", r.stderr)
        self.assertNotIn("A subcommand is required", r.stderr)


class TrainExportTest(unittest.TestCase):
    def test_export_into_a_missing_directory_fails_at_start(self):
        start = time.monotonic()
        r = run_kiln("train", os.path.join(SOURCE_DIR, "configs", "tiny.yaml"), "--export",
                     "/nonexistent/dir/w.safetensors", "--max-steps", "50", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--export", r.stderr)
        self.assertIn("/nonexistent/dir", r.stderr)
        self.assertLess(time.monotonic() - start, 10)


class CommBenchFlagsTest(unittest.TestCase):
    def check_refused(self, flag, value, expect):
        args = {"--op": "allreduce", "--max-bytes": "8", "--min-bytes": "8"}
        args[flag] = value
        flat = [x for kv in args.items() for x in kv]
        r = run_kiln("comm-bench", "--ranks", "3", *flat, timeout=60)
        self.assertEqual(r.returncode, 2, (flag, value, r.stderr))
        # Once, from the launcher: no rank was started to repeat it.
        self.assertEqual(r.stderr.count(expect), 1, r.stderr)
        self.assertNotIn("rank", r.stderr.replace("--ranks", ""), r.stderr)

    def test_bad_values_are_refused_before_any_rank_starts(self):
        self.check_refused("--op", "frobnicate", "frobnicate")
        self.check_refused("--op", "send", "--op send")
        self.check_refused("--dtype", "f16", "--dtype")
        self.check_refused("--reduce", "prod", "--reduce")
        self.check_refused("--algorithm", "zigzag", "--algorithm")
        self.check_refused("--max-bytes", "0", "--max-bytes 0")
        self.check_refused("--min-bytes", "0", "--min-bytes 0")
        self.check_refused("--max-bytes", "12Q", "--max-bytes")


if __name__ == "__main__":
    unittest.main()
