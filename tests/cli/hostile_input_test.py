"""Issue 10: inputs that crashed kiln, exhausted the machine or were reported as something else.

`kiln train` on /dev/zero read until bad_alloc and on a FIFO hung; a directory as a config said
"required key is missing"; `kiln decode` died of a stack overflow on 100,000 nested '[' and a
255 MiB array took 5 GB; `kiln sample --weights` on a 144-byte file claiming gpt2-124m allocated
2 GB before finding no tensor there. Each is now a quick, clear error.
"""
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, SOURCE_DIR  # noqa: E402

# Address space for the commands that must stay small: far below the 2 GB the old sample
# allocated, far above what loading the tokenizer and a few threads take.
MEMORY_LIMIT_BYTES = 1536 << 20


def kiln(*args, stdin=b"", timeout=60, memory_limit=None):
    def limit():
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    r = subprocess.run([KILN_BIN, *args], input=stdin, capture_output=True, cwd=SOURCE_DIR,
                       timeout=timeout, preexec_fn=limit)
    r.stderr = r.stderr.decode("utf-8", "replace")
    return r


class ConfigInputTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln-hostile-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_a_device_is_refused_not_read_until_bad_alloc(self):
        r = kiln("train", "/dev/zero", timeout=30, memory_limit=MEMORY_LIMIT_BYTES)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("config file /dev/zero: not a regular file", r.stderr)

    def test_a_fifo_is_refused_without_hanging(self):
        fifo = os.path.join(self.tmp, "config.yaml")
        os.mkfifo(fifo)
        r = kiln("train", fifo, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"config file {fifo}: not a regular file", r.stderr)

    def test_a_directory_is_named_as_one(self):
        r = kiln("train", self.tmp, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"config file {self.tmp}: is a directory", r.stderr)
        self.assertNotIn("required key is missing", r.stderr)

    def test_deep_yaml_says_so(self):
        path = os.path.join(self.tmp, "deep.yaml")
        with open(path, "w") as f:
            f.write("model: " + "[" * 100000)
        r = kiln("train", path, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(path + ":1:", r.stderr)
        self.assertIn("YAML nested too deeply", r.stderr)
        self.assertNotIn("bad file", r.stderr)


class DecodeInputTest(unittest.TestCase):
    def test_deep_nesting_is_an_error_not_a_crash(self):
        r = kiln("decode", stdin=b"[" * 100000 + b"]" * 100000, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("stdin: element 0 (byte 1) is not a token id", r.stderr)

    def test_a_large_array_takes_memory_linear_in_its_size(self):
        # 128 MiB of "0," (64 M ids): the tree of the old parser took over 2.5 GB for this.
        n = 64 << 20
        r = kiln("decode", stdin=b"[" + b"0," * (n - 1) + b"0]", timeout=120,
                 memory_limit=MEMORY_LIMIT_BYTES)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout), n)  # id 0 is "!"
        self.assertEqual(r.stdout[:3], b"!!!")

    def test_errors_name_the_element(self):
        r = kiln("decode", stdin=b"[1, 2, 1e3]")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("element 2", r.stderr)
        self.assertIn("'1e3'", r.stderr)
        r = kiln("decode", stdin=b"[1, 99999999999]")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("token id 99999999999 at index 1 is out of range", r.stderr)


class SampleWeightsTest(unittest.TestCase):
    def test_a_file_without_the_tensors_its_metadata_claims_allocates_nothing(self):
        tmp = tempfile.mkdtemp(prefix="kiln-hostile-")
        self.addCleanup(shutil.rmtree, tmp, True)
        meta = {"format": "kiln-gpt2", "n_layer": "12", "n_head": "12", "n_embd": "768",
                "block_size": "1024", "vocab_size": "50257"}
        header = json.dumps({"__metadata__": meta}, separators=(",", ":")).encode()
        header += b" " * (-(8 + len(header)) % 8)
        path = os.path.join(tmp, "gpt2-124m.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header)
        self.assertLess(os.path.getsize(path), 200)
        r = kiln("sample", "--weights", path, "--tokens", "1", "--threads", "1", timeout=60,
                 memory_limit=MEMORY_LIMIT_BYTES)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"{path}: no tensor 'wte.weight'", r.stderr)


if __name__ == "__main__":
    unittest.main()
