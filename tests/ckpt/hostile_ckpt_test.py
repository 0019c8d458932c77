"""Issue 10: checkpoint directories a hostile or broken writer can leave, through `kiln ckpt`.

A manifest with a valid checksum and metadata nested 200,000 deep killed ls/verify/latest with
SIGSEGV, so resume never fell back; sizes whose sum wraps past 2^64 were listed as complete; a
FIFO in place of a shard hung verify. Each must be reported as corruption naming the file, and
resume must pick the previous checkpoint.
"""
import ctypes
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import run_kiln  # noqa: E402

SHARD = "rank_00000_of_00001.safetensors"
PREFIX_HEAD = '{"manifest_xxh3":"'
PREFIX_TAIL = '","body":'

_xxhash = ctypes.CDLL("libxxhash.so.0")  # what kiln_base links; computes the manifest checksum
_xxhash.XXH3_64bits.restype = ctypes.c_uint64
_xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def step_dir(root, step):
    return os.path.join(root, f"step_{step:09d}")


def events(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def rewrite_body(manifest_path, change):
    """Rewrites the manifest's body with change(body_text), its checksum recomputed."""
    with open(manifest_path) as f:
        text = f.read()
    start = len(PREFIX_HEAD) + 16 + len(PREFIX_TAIL)
    body = change(text[start:-2]).encode()
    digest = "%016x" % _xxhash.XXH3_64bits(body, len(body))
    with open(manifest_path, "wb") as f:
        f.write((PREFIX_HEAD + digest + PREFIX_TAIL).encode() + body + b"}\n")


class HostileCkptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln-hostile-ckpt-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.dir = os.path.join(self.tmp, "ckpt")
        r = run_kiln("ckpt", "write-test", self.dir, "--json", "--bytes", "64K", "--steps", "2",
                     "--keep", "0", timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.manifest = os.path.join(step_dir(self.dir, 2), "manifest.json")

    def assert_step_2_is_skipped_for(self, what):
        r = run_kiln("ckpt", "ls", self.dir, "--json", timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)  # a signal would be a negative return code
        listed = {e["step"]: e for e in events(r.stdout)}
        self.assertEqual(listed[1]["state"], "complete")
        r = run_kiln("ckpt", "verify", self.dir, timeout=30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(what, r.stderr)
        r = run_kiln("ckpt", "latest", self.dir, "--json", timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        choice = events(r.stdout)[0]
        self.assertEqual(choice["chosen"]["step"], 1)
        self.assertEqual(choice["skipped"][0]["step"], 2)
        self.assertIn(what, choice["skipped"][0]["reason"])
        return listed

    def test_a_deeply_nested_manifest_is_corruption_and_resume_falls_back(self):
        deep = '{"x":' + "[" * 200000 + "]" * 200000 + "}"
        rewrite_body(self.manifest, lambda body: body[:body.rindex('"metadata":')] +
                     '"metadata":' + deep + "}")
        listed = self.assert_step_2_is_skipped_for(self.manifest + ": body: JSON nested more than")
        self.assertEqual(listed[2]["state"], "invalid")
        r = run_kiln("ckpt", "write-test", self.dir, "--json", "--bytes", "64K", "--steps", "3",
                     "--keep", "0", "--resume", timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        resumed = [e for e in events(r.stdout) if e["event"] == "resumed"]
        self.assertEqual(resumed[0]["step"], 1)

    def test_sizes_whose_sum_overflows_are_not_complete(self):
        def two_huge_files(body):
            j = json.loads(body)
            j["world_size"] = 2
            f0 = dict(j["files"][0], size_bytes=2**63)
            f1 = dict(j["files"][0], rank=1, name="rank_00001_of_00002.safetensors",
                      size_bytes=2**63 + 5)
            f0["name"] = "rank_00000_of_00002.safetensors"
            j["files"] = [f0, f1]
            j["total_bytes"] = 5  # what 2^63 + 2^63 + 5 wraps to
            return json.dumps(j, separators=(",", ":"))
        rewrite_body(self.manifest, two_huge_files)
        listed = self.assert_step_2_is_skipped_for(self.manifest + ": files' size_bytes overflow")
        self.assertEqual(listed[2]["state"], "invalid")

    def test_a_fifo_as_a_shard_fails_verify_without_hanging(self):
        shard = os.path.join(step_dir(self.dir, 2), SHARD)
        os.remove(shard)
        os.mkfifo(shard)  # no writer: opening it for reading used to block forever
        self.assert_step_2_is_skipped_for(shard + ": not a regular file")


if __name__ == "__main__":
    unittest.main()
