"""Job and attempt in every rendezvous key (issue 10, item 8), with real processes: ranks of
`kiln train` started by hand against one long-lived `kiln store`, as a scheduler restarting a job
would.

- Attempt 1 of a job on the store attempt 0 used: its rank 0 comes up alone first and waits for
  attempt 1's rank 1. Keys without the attempt (`train/rank/1`, `train/shm/1`, ...) would hand it
  attempt 0's records at once (a dead process's address and shared-memory inbox) and it would
  fail; with them it waits, trains, and its losses are attempt 0's.
- A bad KILN_JOB_ID or KILN_ATTEMPT is bad input (exit 2) naming the variable, in a rank and in a
  launcher; a launcher passes its own job and attempt on to its ranks, or makes a job id up.

Needs the data from scripts/fetch-data.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, SOURCE_DIR, run_kiln  # noqa: E402

TRAIN_DIR = os.path.join(SOURCE_DIR, "data", "sotu", "train")
VAL_DIR = os.path.join(SOURCE_DIR, "data", "sotu", "val")
CONFIG = """model: {{n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, vocab_size: 50257}}
data: {{train: {train}, val: {val}}}
train: {{batch: 4, seq: 64, max_steps: 4, lr: 0.001, min_lr: 0.0001, warmup_steps: 2,
         val_every: 0, val_batches: 1, seed: 7, threads: 1}}
"""
TOKEN = "attempt-test-token"
TIMEOUT_S = 120  # one run of 4 steps takes a second or two
ALONE_S = 2.0    # how long attempt 1's rank 0 waits alone: ample to read stale records


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KILN_") and not k.startswith("SLURM_")}
    env.update(extra)
    return env


def json_lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line, parse_float=str))
    return out


class AttemptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for path in (TRAIN_DIR, VAL_DIR):
            if not os.path.isdir(path):
                raise AssertionError(f"{path} is missing: run scripts/fetch-data")
        cls.dir = tempfile.mkdtemp(prefix="kiln-attempt-")
        cls.config = os.path.join(cls.dir, "attempt.yaml")
        with open(cls.config, "w") as f:
            f.write(CONFIG.format(train=TRAIN_DIR, val=VAL_DIR))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def setUp(self):
        # The store's log goes to a file, not a pipe: nobody reads a pipe while the ranks run,
        # and a full one would block the store's logging and with it every rank.
        self.store_log = tempfile.TemporaryFile(mode="w+", dir=self.dir)
        self.addCleanup(self.store_log.close)
        self.store = subprocess.Popen([KILN_BIN, "store", "--json", "--port", "0"],
                                      stdout=subprocess.PIPE, stderr=self.store_log, text=True,
                                      env=clean_env(KILN_JOB_TOKEN=TOKEN))
        self.addCleanup(self.stop_store)
        event = json.loads(self.store.stdout.readline() or "{}")
        self.store_log.seek(0)
        self.assertEqual(event.get("event"), "serving",
                         "kiln store did not start: " + self.store_log.read()[-4000:])
        self.address = f"127.0.0.1:{event['port']}"
        self.procs = []
        self.addCleanup(self.kill_ranks)

    def stop_store(self):
        self.store.kill()
        self.store.communicate(timeout=30)

    def kill_ranks(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)

    def rank(self, rank, attempt, ckpt_dir):
        env = clean_env(KILN_RANK=str(rank), KILN_WORLD_SIZE="2", KILN_STORE_ADDR=self.address,
                        KILN_JOB_TOKEN=TOKEN, KILN_JOB_ID="drill", KILN_ATTEMPT=str(attempt))
        # Output to files, not pipes: nothing reads a pipe while another rank is waited for, and
        # a full one would block the rank that writes it (and with it the whole job).
        out = tempfile.TemporaryFile(mode="w+", dir=self.dir)
        err = tempfile.TemporaryFile(mode="w+", dir=self.dir)
        self.addCleanup(out.close)
        self.addCleanup(err.close)
        p = subprocess.Popen([KILN_BIN, "--log-level", "warn", "train", self.config, "--json",
                              "--peak-gflops", "100", "--ckpt-dir", ckpt_dir, "--ckpt-every", "2"],
                             stdout=out, stderr=err, text=True, env=env)
        p.out, p.err = out, err
        self.procs.append(p)
        return p

    @staticmethod
    def output(p):
        p.out.seek(0)
        p.err.seek(0)
        return p.out.read(), p.err.read()

    def finish(self, procs):
        deadline = time.monotonic() + TIMEOUT_S
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        outs = [self.output(p) for p in procs]
        for r, (p, (_, err)) in enumerate(zip(procs, outs)):
            self.assertEqual(p.poll(), 0, f"rank {r} of {len(procs)}:\n" + err[-4000:] +
                             "\nthe others:\n" + "\n".join(e[-2000:] for _, e in outs))
        return [{int(x["step"]): x["loss"] for x in json_lines(out) if "step" in x}
                for out, _ in outs]

    def test_a_second_attempt_on_the_same_store_never_sees_the_first(self):
        first = self.finish([self.rank(r, 0, os.path.join(self.dir, "a0")) for r in (0, 1)])
        self.assertEqual(sorted(first[0]), [1, 2, 3, 4])

        d1 = os.path.join(self.dir, "a1")
        alone = self.rank(0, 1, d1)
        time.sleep(ALONE_S)
        self.assertIsNone(alone.poll(), "attempt 1's rank 0 did not wait for attempt 1's rank 1: "
                          + self.output(alone)[1][-4000:])
        second = self.finish([alone, self.rank(1, 1, d1)])
        self.assertEqual(second[0], first[0], "attempt 1 trained differently")
        r = run_kiln("ckpt", "ls", d1, "--json")
        listed = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        self.assertEqual([(e["step"], e["state"]) for e in listed],
                         [(2, "complete"), (4, "complete")], r.stdout)

    def test_a_bad_job_id_or_attempt_is_bad_input_naming_the_variable(self):
        cases = [("KILN_ATTEMPT", "x", "KILN_ATTEMPT='x' is not an integer"),
                 ("KILN_ATTEMPT", "-1", "KILN_ATTEMPT=-1 is out of range"),
                 ("KILN_JOB_ID", "a/b", "KILN_JOB_ID='a/b'")]
        for name, value, message in cases:
            with self.subTest(name=name, value=value):
                # A rank: the variables are read before the store is contacted.
                env = clean_env(KILN_RANK="0", KILN_WORLD_SIZE="2", KILN_STORE_ADDR=self.address,
                                KILN_JOB_TOKEN=TOKEN, **{name: value})
                r = subprocess.run([KILN_BIN, "train", self.config], capture_output=True,
                                   text=True, env=env, timeout=TIMEOUT_S)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
                # A launcher, which would pass them on.
                r = subprocess.run([KILN_BIN, "train", self.config, "--nproc", "2"],
                                   capture_output=True, text=True, timeout=TIMEOUT_S,
                                   env=clean_env(**{name: value}))
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)

    def joined(self, env):
        r = subprocess.run([KILN_BIN, "--log-level", "info", "train", self.config, "--nproc", "2",
                            "--max-steps", "1", "--peak-gflops", "100", "--json"],
                           capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        return {j["component"]: j for j in json_lines(r.stderr) if j.get("msg") == "joining the job"}

    def test_the_launcher_passes_its_job_on_or_makes_one_up(self):
        joined = self.joined(clean_env(KILN_JOB_ID="from-scheduler", KILN_ATTEMPT="4"))
        self.assertEqual(sorted(joined), ["train.rank0", "train.rank1"])
        for j in joined.values():
            self.assertEqual((j["job_id"], j["attempt"]), ("from-scheduler", 4))
            self.assertEqual(j["store_prefix"], "kiln/job/from-scheduler/attempt/4/train")
        joined = self.joined(clean_env())
        ids = {j["job_id"] for j in joined.values()}
        self.assertEqual(len(ids), 1, joined)
        self.assertTrue(ids.pop().startswith("local-"), joined)
        self.assertEqual({j["attempt"] for j in joined.values()}, {0})


if __name__ == "__main__":
    unittest.main()
