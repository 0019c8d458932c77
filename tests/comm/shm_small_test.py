"""A /dev/shm too small for the shared-memory transport (Docker's default is 64 MiB): the ranks
fail at start-up with a message naming the bytes needed and the space free, not with SIGBUS.

Each test mounts a 256 KiB tmpfs over /dev/shm in a private mount namespace (`unshare -m`, root
only), so the rest of the machine never sees it. Each of two ranks needs an inbox of about
1 MiB (docs/comm.md: 8 slots of 64 KiB per direction and peer). Without root or unshare the test
fails under CI (CI=true) and skips elsewhere, loudly.
"""
import os
import shutil
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN  # noqa: E402


def can_unshare():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10)
    return r.returncode == 0


class SmallShmTest(unittest.TestCase):
    def setUp(self):
        if not can_unshare():
            why = "needs root and unshare -m to mount a small tmpfs over /dev/shm"
            if os.environ.get("CI") == "true":
                self.fail(why)
            self.skipTest(why)

    def run_in_small_shm(self, *kiln_args, size="256k"):
        script = ('mount -t tmpfs -o size=%s tmpfs /dev/shm && exec "$@"' % size)
        return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", KILN_BIN, *kiln_args],
                              capture_output=True, text=True, timeout=120)

    def test_comm_bench_fails_cleanly_naming_sizes(self):
        r = self.run_in_small_shm("comm-bench", "--op", "allreduce", "--ranks", "2",
                                  "--transport", "shm", "--min-bytes", "8", "--max-bytes", "64K",
                                  "--iters", "2", "--timeout-ms", "10000")
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0, out)
        # A rank killed by a signal shows as a negative code here, or in the launcher's report.
        self.assertGreater(r.returncode, 0, out)
        self.assertNotIn("SIGBUS", out)
        self.assertNotIn("signal " + str(int(signal.SIGBUS)), out)
        self.assertIn("is /dev/shm large enough?", out)
        self.assertRegex(out, r"needs \d+ bytes")
        self.assertRegex(out, r"/dev/shm has \d+ [KM]iB free of 256 KiB")

    def test_a_large_enough_tmpfs_still_works(self):
        r = self.run_in_small_shm("comm-bench", "--op", "allreduce", "--ranks", "2",
                                  "--transport", "shm", "--min-bytes", "8", "--max-bytes", "1K",
                                  "--iters", "2", size="16m")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
