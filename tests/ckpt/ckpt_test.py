"""Process-level tests of kiln_ckpt through `kiln ckpt` (docs/ckpt.md): a checkpoint is what a
valid manifest says and nothing less; verify names a changed file; resume falls back past a
corrupt or unfinished checkpoint and says why; retention keeps exactly K; a writer killed with
SIGKILL half-way through a write, or a disk that fills up, leaves the previous checkpoint intact
and it is what resume picks; the overlap policy's outcomes are counted.

The drill (`kiln ckpt write-test`) is a stand-in training loop: every step it fills N bytes of
state with a pattern unique to the step and saves it through the asynchronous checkpointer;
with --resume it first loads the newest checkpoint that verifies and checks the pattern.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, run_kiln, skip_unless_ci, wait_until  # noqa: E402

SHARD = "rank_00000_of_00001.safetensors"


def events(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def step_dir(root, step):
    return os.path.join(root, f"step_{step:09d}")


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


class CkptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln-ckpt-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.dir = os.path.join(self.tmp, "ckpt")

    def drill(self, *args, root=None, expect_rc=0, timeout=120):
        r = run_kiln("ckpt", "write-test", root or self.dir, "--json", *args, timeout=timeout)
        self.assertEqual(r.returncode, expect_rc, r.stdout + r.stderr)
        return r, events(r.stdout)

    def ls(self, root=None):
        r = run_kiln("ckpt", "ls", root or self.dir, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return {e["step"]: e for e in events(r.stdout)}

    def latest(self, root=None):
        r = run_kiln("ckpt", "latest", root or self.dir, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return events(r.stdout)[0]

    def complete_steps(self, root=None):
        return sorted(s for s, e in self.ls(root).items() if e["state"] == "complete")

    def test_retention_keeps_exactly_k_and_resume_continues_after_the_newest(self):
        _, ev = self.drill("--bytes", "1M", "--steps", "5", "--keep", "2")
        done = ev[-1]
        self.assertEqual(done["event"], "done")
        self.assertEqual(done["failed"], 0)
        self.assertEqual(done["started"] + done["waited"] + done["skipped"], 5)
        self.assertEqual(sorted(self.ls()), [4, 5])
        self.assertEqual(self.complete_steps(), [4, 5])
        self.assertEqual(run_kiln("ckpt", "verify", self.dir).returncode, 0)
        self.assertEqual(self.latest()["chosen"]["step"], 5)

        _, ev = self.drill("--bytes", "1M", "--steps", "7", "--keep", "2", "--resume")
        self.assertIn({"event": "resumed", "step": 5, "path": step_dir(self.dir, 5)}, ev)
        self.assertEqual([e["step"] for e in ev if e["event"] == "save"], [6, 7])
        self.assertEqual(self.complete_steps(), [6, 7])

    def test_a_flipped_byte_fails_verify_naming_the_file_and_resume_falls_back(self):
        self.drill("--bytes", "1M", "--steps", "2", "--keep", "0")
        shard = os.path.join(step_dir(self.dir, 2), SHARD)
        flip_byte(shard, os.path.getsize(shard) // 2)

        r = run_kiln("ckpt", "verify", self.dir)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"step_000000002/{SHARD}: xxh3 mismatch", r.stderr)
        self.assertNotIn("step_000000001/", r.stderr)
        r = run_kiln("ckpt", "verify", self.dir, "--json")
        self.assertEqual(r.returncode, 1)
        verdicts = {e["step"]: e for e in events(r.stdout)}
        self.assertTrue(verdicts[1]["ok"])
        self.assertFalse(verdicts[2]["ok"])
        self.assertFalse(verdicts[2]["files"][0]["ok"])
        self.assertIn("xxh3 mismatch", verdicts[2]["files"][0]["error"])
        self.assertEqual(run_kiln("ckpt", "verify", step_dir(self.dir, 1)).returncode, 0)
        self.assertEqual(run_kiln("ckpt", "verify", step_dir(self.dir, 2)).returncode, 1)

        choice = self.latest()
        self.assertEqual(choice["chosen"]["step"], 1)
        self.assertEqual(len(choice["skipped"]), 1)
        self.assertEqual(choice["skipped"][0]["step"], 2)
        self.assertIn(SHARD, choice["skipped"][0]["reason"])

        # The drill resumes from step 1, moves the corrupt step 2 aside and writes it anew.
        _, ev = self.drill("--bytes", "1M", "--steps", "3", "--keep", "0", "--resume")
        self.assertEqual([e["event"] for e in ev[:3]], ["skipped_checkpoint", "set_aside", "resumed"])
        self.assertEqual(ev[2]["step"], 1)
        self.assertTrue(os.path.isdir(step_dir(self.dir, 2) + ".corrupt"))
        self.assertEqual(self.complete_steps(), [1, 2, 3])
        self.assertEqual(run_kiln("ckpt", "verify", self.dir).returncode, 0)

    def test_a_checkpoint_without_a_valid_manifest_does_not_exist(self):
        self.drill("--bytes", "256K", "--steps", "3", "--keep", "0")
        os.remove(os.path.join(step_dir(self.dir, 3), "manifest.json"))
        flip_byte(os.path.join(step_dir(self.dir, 2), "manifest.json"), 60)

        listed = self.ls()
        self.assertEqual(listed[1]["state"], "complete")
        self.assertEqual(listed[2]["state"], "invalid")
        self.assertIn("manifest", listed[2]["problem"])
        self.assertEqual(listed[3]["state"], "incomplete")
        self.assertIn("no manifest.json", listed[3]["problem"])

        choice = self.latest()
        self.assertEqual(choice["chosen"]["step"], 1)
        self.assertEqual([s["step"] for s in choice["skipped"]], [3, 2])
        self.assertIn("no manifest.json", choice["skipped"][0]["reason"])
        self.assertIn("manifest checksum mismatch", choice["skipped"][1]["reason"])

        r = run_kiln("ckpt", "verify", self.dir)
        self.assertEqual(r.returncode, 1)
        self.assertIn("step_000000002/manifest.json", r.stderr)

    def test_sigkill_in_the_middle_of_a_write_leaves_the_previous_checkpoint(self):
        # 8 MiB at 2 MiB/s: each write takes about 4 s, long enough to be seen and killed half-way
        # even on a loaded machine.
        proc = subprocess.Popen([KILN_BIN, "ckpt", "write-test", self.dir, "--json", "--bytes",
                                 "8M", "--steps", "3", "--keep", "0", "--throttle", "2M",
                                 "--chunk", "1M"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            seen = []
            while True:
                line = proc.stdout.readline()
                if not line:  # stderr is read only now: reading it blocks until the drill exits
                    self.fail("drill exited early: " + proc.stderr.read())
                seen.append(json.loads(line))
                if seen[-1]["event"] == "save" and seen[-1]["step"] == 2:
                    break
            self.assertIn("written", [e["event"] for e in seen])  # step 1 is committed
            tmp = os.path.join(step_dir(self.dir, 2), SHARD + ".tmp")
            wait_until(lambda: os.path.exists(tmp) and os.path.getsize(tmp) > 0, 20,
                       "the write of step 2 to begin")
            proc.send_signal(signal.SIGKILL)
            self.assertEqual(proc.wait(timeout=10), -signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

        self.assertTrue(os.path.exists(tmp), "killed before the write began")
        listed = self.ls()
        self.assertEqual(listed[1]["state"], "complete")
        self.assertEqual(listed[2]["state"], "incomplete")
        self.assertEqual(run_kiln("ckpt", "verify", self.dir).returncode, 0)
        choice = self.latest()
        self.assertEqual(choice["chosen"]["step"], 1)
        self.assertEqual(choice["skipped"][0]["step"], 2)

        # A restart loads step 1 (its pattern checked byte for byte) and redoes steps 2 and 3.
        _, ev = self.drill("--bytes", "8M", "--steps", "3", "--keep", "0", "--resume")
        self.assertIn({"event": "resumed", "step": 1, "path": step_dir(self.dir, 1)}, ev)
        self.assertEqual(self.complete_steps(), [1, 2, 3])
        self.assertFalse(os.path.exists(tmp))

    def test_a_full_disk_names_the_file_and_keeps_the_previous_checkpoint(self):
        mnt = os.path.join(self.tmp, "small")
        os.mkdir(mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt],
                           capture_output=True, text=True)
        if r.returncode != 0:
            skip_unless_ci(self, "cannot mount an 8 MiB tmpfs (needs root): " + r.stderr.strip())
        self.addCleanup(subprocess.run, ["umount", mnt], capture_output=True)
        root = os.path.join(mnt, "ckpt")

        # Two 5 MiB checkpoints do not fit in 8 MiB: the second write fails.
        r, ev = self.drill("--bytes", "5M", "--steps", "2", "--keep", "0", root=root, expect_rc=1)
        failed = [e for e in ev if e["event"] == "write_failed"]
        self.assertEqual(len(failed), 1, ev)
        self.assertEqual(failed[0]["step"], 2)
        self.assertIn(f"step_000000002/{SHARD}", failed[0]["error"])
        self.assertIn("No space left on device", failed[0]["error"])
        self.assertIn("No space left on device", r.stderr)
        self.assertEqual(ev[-1]["failed"], 1)

        self.assertEqual(self.complete_steps(root), [1])
        self.assertEqual(run_kiln("ckpt", "verify", root).returncode, 0)
        self.assertEqual(self.latest(root)["chosen"]["step"], 1)
        self.assertEqual(os.listdir(step_dir(root, 2)), [])  # the temporary file is gone

    def test_skip_policy_drops_requests_while_a_write_is_in_flight_and_counts_them(self):
        # Each write takes at least 1 s (4 MiB at 4 MiB/s); the loop asks every 100 ms.
        _, ev = self.drill("--bytes", "4M", "--steps", "6", "--keep", "0", "--policy", "skip",
                           "--throttle", "4M", "--step-ms", "100")
        saves = [e for e in ev if e["event"] == "save"]
        done = ev[-1]
        self.assertEqual(len(saves), 6)
        self.assertEqual(saves[0]["outcome"], "started")
        self.assertEqual(done["waited"], 0)
        self.assertGreaterEqual(done["skipped"], 1)
        self.assertEqual(done["skipped"], sum(e["outcome"] == "skipped" for e in saves))
        self.assertEqual(done["started"], sum(e["outcome"] == "started" for e in saves))
        self.assertEqual(self.complete_steps(),
                         [e["step"] for e in saves if e["outcome"] == "started"])

    def test_wait_policy_waits_and_counts(self):
        _, ev = self.drill("--bytes", "2M", "--steps", "3", "--keep", "0", "--throttle", "8M")
        outcomes = [e["outcome"] for e in ev if e["event"] == "save"]
        self.assertEqual(outcomes, ["started", "waited", "waited"])
        self.assertEqual(ev[-1]["waited"], 2)
        self.assertEqual(self.complete_steps(), [1, 2, 3])

    def test_missing_directory_is_bad_input(self):
        missing = os.path.join(self.tmp, "nothing-here")
        for sub in ("ls", "verify"):
            r = run_kiln("ckpt", sub, missing)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("nothing-here", r.stderr)
        self.assertIsNone(self.latest(missing)["chosen"])


if __name__ == "__main__":
    unittest.main()
