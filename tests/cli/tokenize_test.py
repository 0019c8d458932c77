"""End-to-end tests of `kiln tokenize`: the token stream it writes (GPT-2 ids, an end-of-text
separator before every document), the shard files' layout and splitting, the summary, and bad
input. Needs GPT-2's tokenizer files from scripts/fetch-data."""
import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import SOURCE_DIR, run_kiln  # noqa: E402

ENCODER = os.path.join(SOURCE_DIR, "data", "gpt2", "encoder.json")
VOCAB = os.path.join(SOURCE_DIR, "data", "gpt2", "vocab.bpe")
END_OF_TEXT = 50256
HEADER_BYTES = 32


def read_shard(path):
    """The tokens of one shard, after checking the header fields the format documents."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, header_bytes, count, _checksum = struct.unpack_from("<8sIIQQ", data)
    assert magic == b"KILNTOK1", magic
    assert version == 1 and header_bytes == HEADER_BYTES, (version, header_bytes)
    assert len(data) == HEADER_BYTES + 2 * count, (path, len(data), count)
    return list(struct.unpack_from(f"<{count}H", data, HEADER_BYTES))


class TokenizeTest(unittest.TestCase):
    def setUp(self):
        for path in (ENCODER, VOCAB):
            self.assertTrue(os.path.exists(path), f"{path} is missing: run scripts/fetch-data")
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def tokenize(self, *inputs, out="out", extra=()):
        out = os.path.join(self.dir, out)
        r = run_kiln("tokenize", *inputs, "--out", out, "--encoder", ENCODER, "--vocab", VOCAB,
                     *extra)
        return r, out

    def stream(self, out):
        shards = sorted(f for f in os.listdir(out) if f.endswith(".bin"))
        tokens = []
        for name in shards:
            tokens += read_shard(os.path.join(out, name))
        return shards, tokens

    def test_each_document_is_preceded_by_end_of_text(self):
        a = self.write("a.txt", "Hello world")
        b = self.write("b.txt", " Hello")
        r, out = self.tokenize(a, b)
        self.assertEqual(r.returncode, 0, r.stderr)
        shards, tokens = self.stream(out)
        self.assertEqual(shards, ["shard_000000.bin"])
        # GPT-2: "Hello" 15496, " world" 995, " Hello" 18435.
        self.assertEqual(tokens, [END_OF_TEXT, 15496, 995, END_OF_TEXT, 18435])
        self.assertEqual([f for f in os.listdir(out) if f.endswith(".tmp")], [])

    def test_literal_end_of_text_in_a_document_is_ordinary_text(self):
        a = self.write("a.txt", "x<|endoftext|>y")
        r, out = self.tokenize(a)
        self.assertEqual(r.returncode, 0, r.stderr)
        _, tokens = self.stream(out)
        self.assertEqual(tokens[0], END_OF_TEXT)
        self.assertNotIn(END_OF_TEXT, tokens[1:])
        self.assertGreater(len(tokens), 3)

    def test_splits_into_shards_of_at_most_shard_tokens(self):
        a = self.write("a.txt", "Hello world")
        b = self.write("b.txt", " Hello")
        r, out = self.tokenize(a, b, extra=("--shard-tokens", "2", "--json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        shards, tokens = self.stream(out)
        self.assertEqual(shards, ["shard_000000.bin", "shard_000001.bin", "shard_000002.bin"])
        self.assertEqual([len(read_shard(os.path.join(out, s))) for s in shards], [2, 2, 1])
        self.assertEqual(tokens, [END_OF_TEXT, 15496, 995, END_OF_TEXT, 18435])
        self.assertEqual(json.loads(r.stdout)["shards"], 3)

    def test_json_summary(self):
        a = self.write("a.txt", "Hello world")
        b = self.write("b.txt", " Hello")
        r, out = self.tokenize(a, b, extra=("--json",))
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1, "one JSON object")
        s = json.loads(lines[0])
        self.assertEqual(s["out"], out)
        self.assertEqual(s["files"], 2)
        self.assertEqual(s["bytes"], len("Hello world") + len(" Hello"))
        self.assertEqual(s["tokens"], 5)
        self.assertEqual(s["shards"], 1)
        self.assertGreaterEqual(s["seconds"], 0)
        self.assertGreater(s["load_seconds"], 0)
        self.assertGreaterEqual(s["mb_per_s"], 0)

    def test_human_summary(self):
        a = self.write("a.txt", "Hello world")
        r, out = self.tokenize(a)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tokenized 1 files", r.stdout)
        self.assertIn("into 3 tokens in 1 shard(s)", r.stdout)
        self.assertIn("MB/s", r.stdout)

    def test_missing_input_is_bad_input_and_writes_nothing(self):
        a = self.write("a.txt", "Hello world")
        missing = os.path.join(self.dir, "missing.txt")
        r, out = self.tokenize(a, missing)
        self.assertEqual(r.returncode, 2)
        self.assertIn(missing, r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_directory_that_holds_shards_is_refused(self):
        a = self.write("a.txt", "Hello world")
        r, out = self.tokenize(a)
        self.assertEqual(r.returncode, 0, r.stderr)
        r, _ = self.tokenize(a)
        self.assertEqual(r.returncode, 2)
        self.assertIn(out, r.stderr)
        self.assertIn("already holds 1 shard", r.stderr)

    def test_missing_tokenizer_files_name_the_file(self):
        a = self.write("a.txt", "Hello world")
        missing = os.path.join(self.dir, "encoder.json")
        r = run_kiln("tokenize", a, "--out", os.path.join(self.dir, "out"), "--encoder", missing,
                     "--vocab", VOCAB)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(missing, r.stderr)

    def test_zero_shard_tokens_is_bad_input(self):
        a = self.write("a.txt", "Hello world")
        r, _ = self.tokenize(a, extra=("--shard-tokens", "0"))
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
