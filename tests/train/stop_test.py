"""Signals to `kiln train` with real processes (issue 10, item 6), on a 2-layer GPT-2 over the
SOTU shards:

- SIGUSR1 to a rank of a 2-rank run: its log shows its flight recorder and training goes on to
  the end, exit 0; SIGUSR1 to the launcher reaches every rank.
- SIGTERM to a 1-rank run, to the launcher of a 2-rank run, and to one rank only of a 2-rank run
  (the other never sees it): a checkpoint of the step it stopped after (every rank the same
  step), exit 75 (stopped, resumable), and a rerun with the same --ckpt-dir resumes there with
  step lines equal, as printed, to an uninterrupted run's.

Runs of the same world size and layout are deterministic, so those numbers are compared as the
exact text kiln printed. Needs the data from scripts/fetch-data.
"""
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, SOURCE_DIR, run_kiln, wait_until  # noqa: E402

TRAIN_DIR = os.path.join(SOURCE_DIR, "data", "sotu", "train")
VAL_DIR = os.path.join(SOURCE_DIR, "data", "sotu", "val")

# As tests/train/dp_ckpt_test.py: 20 steps take a few seconds on two cores; threads 1 so two
# ranks share two cores.
CONFIG = """model: {{n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, vocab_size: 50257}}
data: {{train: {train}, val: {val}}}
train: {{batch: 8, seq: 64, max_steps: 20, lr: 0.001, min_lr: 0.0001, warmup_steps: 2,
         grad_clip: 1.0, val_every: 10, val_batches: 2, seed: 7, threads: 1}}
"""
COMMON = ("--peak-gflops", "100", "--json")
TWO_RANKS = ("--nproc", "2", "--batch", "4")
MAX_STEPS = 20
TIMEOUT_S = 120  # one command; these runs take seconds
SIGNAL_AT_STEP = 3  # the signal is sent once this step's line is out: both ranks are training
EXIT_STOPPED = 75  # launch::kExitStoppedResumable (include/kiln/launch/rank_env.h)


def step_dir(root, step):
    return os.path.join(root, f"step_{step:09d}")


def step_lines(stdout):
    lines = [json.loads(line, parse_float=str) for line in stdout.splitlines() if line.strip()]
    return {int(x["step"]): x for x in lines if "step" in x}, next(
        (x for x in lines if x.get("event") == "done"), None)


class LiveRun:
    """`kiln train` running in the background: step lines as they come, stderr's JSON log lines
    gathered throughout (so a chatty rank never blocks on a full pipe)."""

    def __init__(self, config, *flags):
        self.proc = subprocess.Popen(
            [KILN_BIN, "--log-level", "info", "train", config, *COMMON, *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.stdout = []
        self.stderr = []
        self.threads = [threading.Thread(target=self._pump_stdout, daemon=True),
                        threading.Thread(target=self._pump_stderr, daemon=True)]
        for t in self.threads:
            t.start()

    def _pump_stdout(self):
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def logs(self):
        out = []
        for line in list(self.stderr):
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def wait_for_step(self, step):
        while True:
            line = self.lines.get(timeout=TIMEOUT_S)
            if line is None:
                raise AssertionError(f"training ended before step {step}: {self.err()}")
            if line.startswith("{") and json.loads(line).get("step", 0) >= step:
                return

    def rank_pids(self, world):
        """{rank: pid} from the launcher's "rank started" log lines."""
        def started():
            pids = {int(j["rank"]): int(j["pid"]) for j in self.logs()
                    if j.get("msg") == "rank started"}
            return pids if len(pids) == world else None
        return wait_until(started, 30, f"{world} ranks to start")

    def finish(self):
        """Waits for the exit; returns (exit code, step lines by step, the done line)."""
        try:
            rc = self.proc.wait(timeout=TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for t in self.threads:
                t.join(timeout=10)
            self.proc.stdout.close()
            self.proc.stderr.close()
        steps, done = step_lines("".join(self.stdout))
        return rc, steps, done

    def err(self):
        return "".join(self.stderr)[-6000:]


class StopTest(unittest.TestCase):
    straight_runs = {}  # flags -> step lines of an uninterrupted run, shared by the tests

    @classmethod
    def setUpClass(cls):
        for path in (TRAIN_DIR, VAL_DIR):
            if not os.path.isdir(path):
                raise AssertionError(f"{path} is missing: run scripts/fetch-data")
        cls.config_dir = tempfile.TemporaryDirectory(prefix="kiln-stop-")
        cls.config = os.path.join(cls.config_dir.name, "stop.yaml")
        with open(cls.config, "w") as f:
            f.write(CONFIG.format(train=TRAIN_DIR, val=VAL_DIR))

    @classmethod
    def tearDownClass(cls):
        cls.config_dir.cleanup()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln-stop-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def train(self, *flags):
        r = run_kiln("--log-level", "warn", "train", self.config, *COMMON, *flags,
                     timeout=TIMEOUT_S)
        steps, done = step_lines(r.stdout)
        return r.returncode, steps, done, r.stderr

    def straight(self, *flags):
        if flags not in StopTest.straight_runs:
            rc, steps, _, err = self.train(*flags)
            self.assertEqual(rc, 0, err)
            self.assertEqual(sorted(steps), list(range(1, MAX_STEPS + 1)))
            StopTest.straight_runs[flags] = steps
        return StopTest.straight_runs[flags]

    def test_sigusr1_logs_a_ranks_flight_recorder_and_training_goes_on(self):
        run = LiveRun(self.config, *TWO_RANKS)
        pids = run.rank_pids(2)
        run.wait_for_step(SIGNAL_AT_STEP)
        os.kill(pids[1], signal.SIGUSR1)

        def dumps(component):
            return [j for j in run.logs() if j.get("component") == component and
                    j.get("msg") == "flight recorder (SIGUSR1)"]
        wait_until(lambda: dumps("train.rank1"), 30, "rank 1's flight recorder in its log")
        dump = json.loads(dumps("train.rank1")[0]["flight_recorder"])
        self.assertEqual(dump["rank"], 1)
        self.assertEqual(dump["reason"], "SIGUSR1")
        self.assertTrue(any(e["op"] == "allreduce" for e in dump["entries"]), dump["entries"][-3:])
        self.assertEqual(dumps("train.rank0"), [], "only rank 1 was signalled")
        # The launcher passes SIGUSR1 on to every rank.
        os.kill(run.proc.pid, signal.SIGUSR1)
        wait_until(lambda: dumps("train.rank0") and len(dumps("train.rank1")) == 2, 30,
                   "both ranks' flight recorders after SIGUSR1 to the launcher")
        rc, steps, done = run.finish()
        self.assertEqual(rc, 0, run.err())
        self.assertEqual(sorted(steps), list(range(1, MAX_STEPS + 1)))
        self.assertNotIn("stopped", done)

    def stop_and_resume(self, flags, send):
        """Starts a run with a checkpoint dir, calls send(run) once step SIGNAL_AT_STEP is out,
        and checks the stop, the checkpoint and an exact resume against a straight run."""
        straight = self.straight(*flags)
        d = os.path.join(self.tmp, "ckpt")
        run = LiveRun(self.config, *flags, "--ckpt-dir", d)
        try:
            run.wait_for_step(SIGNAL_AT_STEP)
            send(run)
        finally:
            rc, steps, done = run.finish()
        self.assertEqual(rc, EXIT_STOPPED, run.err())
        stop = max(steps)
        self.assertGreaterEqual(stop, SIGNAL_AT_STEP)
        self.assertLess(stop, MAX_STEPS, "the run ended before the signal was taken")
        self.assertEqual(sorted(steps), list(range(1, stop + 1)))
        self.assertEqual(done["stopped"], True)
        self.assertEqual(int(done["steps"]), stop)
        # The stop step's checkpoint, complete (every rank's shard) and the only one.
        r = run_kiln("ckpt", "ls", d, "--json")
        listed = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        self.assertEqual([(e["step"], e["state"]) for e in listed], [(stop, "complete")], r.stdout)
        self.assertEqual(run_kiln("ckpt", "verify", step_dir(d, stop)).returncode, 0)
        for s in range(1, stop + 1):
            self.assertEqual(steps[s]["loss"], straight[s]["loss"], f"step {s}")

        rc, rest, done, err = self.train(*flags, "--ckpt-dir", d)
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(rest), list(range(stop + 1, MAX_STEPS + 1)), err)
        for s in rest:
            for key in ("loss", "grad_norm", "lr", "val_loss"):
                self.assertEqual(rest[s].get(key), straight[s].get(key), f"{key} at step {s}")
        self.assertNotIn("stopped", done)
        return run

    def test_sigterm_stops_one_rank_with_a_checkpoint_and_the_rerun_is_exact(self):
        self.stop_and_resume((), lambda run: run.proc.send_signal(signal.SIGTERM))

    def test_sigterm_to_the_launcher_stops_two_ranks_at_one_step(self):
        run = self.stop_and_resume(TWO_RANKS, lambda run: run.proc.send_signal(signal.SIGTERM))
        stopped = {j["component"] for j in run.logs()
                   if j.get("msg", "").startswith("stopped on request")}
        self.assertEqual(stopped, {"train.rank0", "train.rank1"}, run.err())

    def test_sigterm_to_one_rank_stops_both_at_the_same_step(self):
        def term_rank_1(run):
            os.kill(run.rank_pids(2)[1], signal.SIGTERM)
        run = self.stop_and_resume(TWO_RANKS, term_rank_1)
        asked = {j["component"] for j in run.logs() if j.get("msg", "").startswith("stop requested")}
        self.assertEqual(asked, {"train.rank1"}, "only rank 1 was signalled")


if __name__ == "__main__":
    unittest.main()
