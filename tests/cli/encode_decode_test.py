"""End-to-end tests of `kiln encode` and `kiln decode`: GPT-2 ids through the CLI, round trips
of real text and of invalid UTF-8, special tokens, and the errors users see.

kiln runs with the repository root as its working directory, so the default vocabulary paths
(data/gpt2/encoder.json, data/gpt2/vocab.bpe) are the ones under test; scripts/test fetches them.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, SOURCE_DIR  # noqa: E402

ENCODER = os.path.join(SOURCE_DIR, "data", "gpt2", "encoder.json")
VOCAB = os.path.join(SOURCE_DIR, "data", "gpt2", "vocab.bpe")


def kiln(*args, stdin=b"", cwd=SOURCE_DIR, timeout=60):
    """Runs kiln with `stdin` (bytes); returns the CompletedProcess (bytes stdout, text stderr)."""
    r = subprocess.run([KILN_BIN, *args], input=stdin, capture_output=True, cwd=cwd,
                       timeout=timeout)
    r.stderr = r.stderr.decode("utf-8", "replace")
    return r


def encode(data, *args):
    r = kiln("encode", *args, stdin=data)
    if r.returncode != 0:
        raise AssertionError(f"kiln encode exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def decode(ids):
    r = kiln("decode", stdin=json.dumps(ids).encode())
    if r.returncode != 0:
        raise AssertionError(f"kiln decode exited {r.returncode}: {r.stderr}")
    return r.stdout


class EncodeDecodeTest(unittest.TestCase):
    def setUp(self):
        for path in (ENCODER, VOCAB):
            if not os.path.exists(path):
                self.fail(f"{path} is missing: run scripts/fetch-data")

    def test_encodes_gpt2_ids_as_one_json_array_line(self):
        r = kiln("encode", stdin="Hello world".encode())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count(b"\n"), 1)
        self.assertEqual(json.loads(r.stdout), [15496, 995])
        self.assertEqual(encode(b""), [])

    def test_sotu_addresses_round_trip(self):
        files = sorted(glob.glob(os.path.join(SOURCE_DIR, "data", "sotu", "raw", "*", "*.txt")))
        self.assertEqual(len(files), 233, "run scripts/fetch-data")
        for path in files[::40] + files[-1:]:  # a spread over 1790-2021
            with open(path, "rb") as f:
                text = f.read()
            ids = encode(text)
            self.assertGreater(len(ids), len(text) // 8, path)
            self.assertEqual(decode(ids), text, path)

    def test_invalid_utf8_round_trips_bytewise(self):
        data = b"ok \xff\xfe caf\xc3 \xed\xa0\x80 " + bytes(range(256))
        self.assertEqual(decode(encode(data)), data)

    def test_end_of_text_is_special_unless_no_special(self):
        self.assertEqual(encode(b"a<|endoftext|>b"), [64, 50256, 65])
        self.assertEqual(encode(b"a<|endoftext|>b", "--no-special"),
                         [64, 27, 91, 437, 1659, 5239, 91, 29, 65])
        self.assertEqual(decode([64, 50256, 65]), b"a<|endoftext|>b")

    def test_json_reports_sizes_and_time(self):
        r = kiln("encode", "--json", stdin=b"Hello world")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(list(out), ["bytes", "tokens", "encode_s", "mb_per_s", "ids"])
        self.assertEqual(out["bytes"], 11)
        self.assertEqual(out["tokens"], 2)
        self.assertEqual(out["ids"], [15496, 995])
        self.assertGreaterEqual(out["encode_s"], 0)

    def test_explicit_paths_work_from_anywhere(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = kiln("encode", "--encoder", ENCODER, "--vocab", VOCAB, stdin=b" the", cwd=tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout), [262])

    def test_decode_of_an_out_of_range_id_names_it(self):
        r = kiln("decode", stdin=b"[64, 50257]")
        self.assertEqual(r.returncode, 2)
        self.assertIn("50257", r.stderr)
        self.assertIn("index 1", r.stderr)
        self.assertEqual(r.stdout, b"")

    def test_decode_rejects_what_is_not_an_array_of_ids(self):
        for bad in [b"", b"{}", b"[1, -2]", b"[1, 2.5]", b'["x"]', b"[1, 2"]:
            r = kiln("decode", stdin=bad)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn("stdin", r.stderr, bad)

    def test_missing_vocabulary_says_run_fetch_data(self):
        with tempfile.TemporaryDirectory() as tmp:
            for command in ("encode", "decode"):
                r = kiln(command, stdin=b"[1]", cwd=tmp)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("data/gpt2/encoder.json", r.stderr)
                self.assertIn("run scripts/fetch-data", r.stderr)

    def test_malformed_encoder_json_names_file_and_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "encoder.json")
            with open(bad, "w") as f:
                f.write('{\n  "a": 0,\n  "b" 1\n}\n')
            r = kiln("encode", "--encoder", bad, stdin=b"x")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(bad, r.stderr)
            self.assertIn("line 3", r.stderr)

    def test_malformed_vocab_bpe_names_file_and_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "vocab.bpe")
            with open(VOCAB, encoding="utf-8") as f:
                lines = f.read().split("\n")
            lines[4] = "nonsense"
            with open(bad, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            r = kiln("decode", "--vocab", bad, stdin=b"[1]")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(bad + " line 5", r.stderr)


if __name__ == "__main__":
    unittest.main()
