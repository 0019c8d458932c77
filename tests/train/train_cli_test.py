"""End-to-end tests of `kiln train`, `kiln export` and `kiln sample` with a small GPT-2 on the
SOTU shards: the JSON lines and their fields, the progress line on a terminal and in a pipe,
config and flag errors, /metrics while training, the debug dump's files read by plain Python,
export, and sampling that is deterministic for a seed and whose ids decode to the printed text.
Needs the data from scripts/fetch-data."""
import hashlib
import json
import os
import pty
import select
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, SOURCE_DIR, free_port, http_get, run_kiln, wait_until  # noqa: E402

TRAIN_DIR = os.path.join(SOURCE_DIR, "data", "sotu", "train")
VAL_DIR = os.path.join(SOURCE_DIR, "data", "sotu", "val")
ENCODER = os.path.join(SOURCE_DIR, "data", "gpt2", "encoder.json")
VOCAB = os.path.join(SOURCE_DIR, "data", "gpt2", "vocab.bpe")

# A 2-layer GPT-2 over the full vocabulary: a few steps a second on two cores.
CONFIG = """model: {{n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, vocab_size: 50257}}
data: {{train: {train}, val: {val}}}
train:
  batch: 2
  seq: 32
  max_steps: 4
  lr: 0.003
  warmup_steps: 2
  val_every: 2
  val_batches: 2
  seed: 1337
  threads: 2
"""
STEP_FIELDS = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu", "world",
               "comm_exposed_ms", "ckpt_stall_ms"}
DONE_FIELDS = {"event", "steps", "train_loss", "val_loss", "tokens_per_s", "peak_rss_bytes",
               "config_sha256", "precision"}
TIMEOUT_S = 120  # one command; these runs take seconds


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file, parsed by hand from the format."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def tensor_values(header, data, name):
    entry = header[name]
    begin, end = entry["data_offsets"]
    fmt = {"F32": "f", "I32": "i"}[entry["dtype"]]
    return list(struct.unpack(f"<{(end - begin) // 4}{fmt}", data[begin:end]))


def gpt2_byte_decoder():
    """GPT-2's byte <-> unicode table (encoder.py's bytes_to_unicode), reversed."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decode_ids(ids):
    with open(ENCODER, encoding="utf-8") as f:
        encoder = json.load(f)
    decoder = {v: k for k, v in encoder.items()}
    byte_of = gpt2_byte_decoder()
    return b"".join(bytes(byte_of[c] for c in decoder[i]) for i in ids)


class TrainCliTest(unittest.TestCase):
    def setUp(self):
        for path in (TRAIN_DIR, VAL_DIR, ENCODER, VOCAB):
            self.assertTrue(os.path.exists(path), f"{path} is missing: run scripts/fetch-data")
        self.tmp = tempfile.TemporaryDirectory()
        self.config = self.write_config(CONFIG.format(train=TRAIN_DIR, val=VAL_DIR))

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def write_config(self, text, name="small.yaml"):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def train_json(self, *flags):
        r = run_kiln("train", self.config, "--json", "--peak-gflops", "100", *flags,
                     timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(line) for line in r.stdout.splitlines()]

    def test_json_lines_have_every_field(self):
        lines = self.train_json()
        self.assertEqual(len(lines), 5, lines)
        for i, line in enumerate(lines[:4]):
            expected = STEP_FIELDS | ({"val_loss"} if i + 1 in (2, 4) else set())
            self.assertEqual(set(line), expected, line)
            self.assertEqual(line["step"], i + 1)
            self.assertGreater(line["tokens_per_s"], 0)
            self.assertGreater(line["mfu"], 0)
        self.assertAlmostEqual(lines[0]["lr"], 0.003 / 2)
        self.assertAlmostEqual(lines[1]["lr"], 0.003)
        done = lines[4]
        self.assertEqual(set(done), DONE_FIELDS)
        self.assertEqual(done["event"], "done")
        self.assertEqual(done["steps"], 4)
        self.assertEqual(done["train_loss"], lines[3]["loss"])
        self.assertEqual(done["val_loss"], lines[3]["val_loss"])
        self.assertGreater(done["peak_rss_bytes"], 10 << 20)
        # What was run: the config's text, hashed independently here.
        with open(self.config, "rb") as f:
            self.assertEqual(done["config_sha256"], hashlib.sha256(f.read()).hexdigest())

    def test_same_seed_same_losses_and_flags_override(self):
        a = self.train_json("--max-steps", "3", "--val-every", "0")
        b = self.train_json("--max-steps", "3", "--val-every", "0")
        self.assertEqual(len(a), 4)
        self.assertEqual([x["loss"] for x in a[:3]], [x["loss"] for x in b[:3]])
        self.assertEqual(["val_loss" in x for x in a[:3]], [False, False, True])
        c = self.train_json("--max-steps", "3", "--seed", "7")
        self.assertNotEqual(c[0]["loss"], a[0]["loss"])

    def test_config_error_names_file_line_and_key(self):
        bad = self.write_config(
            CONFIG.format(train=TRAIN_DIR, val=VAL_DIR).replace("  batch: 2", "  batchh: 2"),
            "bad.yaml")
        r = run_kiln("train", bad, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"{bad}:4:3: key 'train.batchh': unknown key", r.stderr)

    def test_bad_flags_are_bad_input_naming_the_flag(self):
        r = run_kiln("train", self.config, "--seq", "1000", timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--seq 1000: out of range [1, 64]", r.stderr)
        r = run_kiln("train", self.config, "--batch", "many", timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--batch", r.stderr)
        r = run_kiln("train", self.path("missing.yaml"), timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("missing.yaml", r.stderr)

    def test_missing_data_names_the_directory(self):
        cfg = self.write_config(CONFIG.format(train=self.path("nowhere"), val=VAL_DIR), "nd.yaml")
        r = run_kiln("train", cfg, timeout=TIMEOUT_S)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("data.train", r.stderr)
        self.assertIn(self.path("nowhere"), r.stderr)

    def test_pipe_gets_only_the_kept_progress_lines(self):
        r = run_kiln("train", self.config, "--peak-gflops", "100", timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\r", r.stdout)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 2, r.stdout)
        self.assertRegex(lines[0], r"^step 2/4 \| loss \d+\.\d{3} \| val \d+\.\d{3} \| \d+ tok/s \| "
                                   r"\d+ ms/step \| ETA \S+$")
        self.assertTrue(lines[1].startswith("step 4/4 | "), lines[1])

    def test_terminal_gets_a_live_line(self):
        leader, follower = pty.openpty()
        proc = subprocess.Popen([KILN_BIN, "train", self.config, "--peak-gflops", "100"],
                                stdout=follower, stderr=subprocess.PIPE)
        os.close(follower)
        out = b""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        os.close(leader)
        self.assertEqual(proc.wait(timeout=TIMEOUT_S), 0, proc.stderr.read())
        proc.stderr.close()
        text = out.decode()
        self.assertIn("\rstep 1/4 | loss ", text)
        self.assertIn("| val - |", text)
        self.assertIn("\rstep 4/4 | ", text)
        self.assertIn("ETA ", text)

    def test_metrics_are_served_while_training(self):
        port = free_port()
        proc = subprocess.Popen([KILN_BIN, "train", self.config, "--max-steps", "100000",
                                 "--metrics-port", str(port), "--peak-gflops", "100",
                                 "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        try:
            def scraped():
                status, body = http_get(f"http://127.0.0.1:{port}/metrics")
                if status != 200:
                    return None
                for line in body.splitlines():
                    if line.startswith("kiln_train_step ") and float(line.split()[1]) >= 2:
                        return body
                return None
            body = wait_until(scraped, 60, "kiln_train_step >= 2 on /metrics")
            for name in ("kiln_train_loss ", "kiln_train_val_loss ",
                         "kiln_train_tokens_per_second ", "kiln_train_mfu ",
                         "kiln_train_step_seconds_count ", "kiln_train_step_seconds_bucket{"):
                self.assertIn(name, body)
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()

    def test_debug_dump_files(self):
        dump = self.path("dump")
        lines = self.train_json("--max-steps", "2", "--debug-dump", dump)
        header, _ = read_safetensors(os.path.join(dump, "weights0.safetensors"))
        meta = header.pop("__metadata__")
        self.assertEqual(meta, {"format": "kiln-gpt2", "n_layer": "2", "n_head": "2",
                                "n_embd": "64", "block_size": "64", "vocab_size": "50257"})
        names = ["wte.weight", "wpe.weight"]
        for i in range(2):
            names += [f"h.{i}.{n}" for n in (
                "ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias",
                "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
                "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias")]
        names += ["ln_f.weight", "ln_f.bias"]
        self.assertEqual(set(header), set(names))
        self.assertEqual(header["wte.weight"]["shape"], [50257, 64])
        self.assertEqual(header["h.1.attn.qkv.weight"]["shape"], [192, 64])
        self.assertEqual(header["h.0.mlp.proj.weight"]["shape"], [64, 256])

        header, data = read_safetensors(os.path.join(dump, "steps.safetensors"))
        header.pop("__metadata__", None)
        self.assertEqual(header["inputs"]["shape"], [2, 2, 32])
        self.assertEqual(header["inputs"]["dtype"], "I32")
        self.assertEqual(header["targets"]["shape"], [2, 2, 32])
        self.assertEqual(header["logits"]["shape"], [2, 32, 50257])
        self.assertEqual(header["logits"]["dtype"], "F32")
        self.assertEqual(header["losses"]["shape"], [2])
        self.assertEqual(set(header) - {"inputs", "targets", "logits", "losses"},
                         {"grad." + n for n in names})
        for n in names:
            self.assertEqual(header["grad." + n]["shape"],
                             [50257, 64] if n == "wte.weight" else
                             read_safetensors(os.path.join(dump, "weights0.safetensors"))[0][n][
                                 "shape"])
        losses = tensor_values(header, data, "losses")
        self.assertEqual([struct.unpack("<f", struct.pack("<f", x["loss"]))[0]
                          for x in lines[:2]], losses)

    def test_export_then_sample_is_deterministic_and_decodes(self):
        weights = self.path("init.safetensors")
        r = run_kiln("export", self.config, "--seed", "3", "--out", weights, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        header, _ = read_safetensors(weights)
        self.assertEqual(header["__metadata__"]["format"], "kiln-gpt2")

        def sample(seed, *extra):
            r = run_kiln("sample", "--weights", weights, "--prompt", "The Congress",
                         "--tokens", "12", "--seed", str(seed), "--threads", "2",
                         "--encoder", ENCODER, "--vocab", VOCAB, *extra, timeout=TIMEOUT_S)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r
        a = json.loads(sample(5, "--json").stdout)
        b = json.loads(sample(5, "--json").stdout)
        c = json.loads(sample(6, "--json").stdout)
        self.assertEqual(a, b)
        self.assertEqual(len(a["tokens"]), 12)
        self.assertNotEqual(a["tokens"], c["tokens"])
        self.assertEqual(a["prompt"], "The Congress")
        self.assertEqual(decode_ids(a["prompt_tokens"]), b"The Congress")
        self.assertTrue(all(0 <= t < 50257 for t in a["tokens"]))
        # The streamed text is the prompt, then exactly the bytes of the sampled ids.
        plain = subprocess.run([KILN_BIN, "sample", "--weights", weights, "--prompt",
                                "The Congress", "--tokens", "12", "--seed", "5", "--threads",
                                "2", "--encoder", ENCODER, "--vocab", VOCAB],
                               capture_output=True, timeout=TIMEOUT_S)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(plain.stdout, b"The Congress" + decode_ids(a["tokens"]) + b"\n")

    def test_trained_weights_sample(self):
        weights = self.path("trained.safetensors")
        self.train_json("--max-steps", "2", "--export", weights)
        r = run_kiln("sample", "--weights", weights, "--tokens", "5", "--encoder", ENCODER,
                     "--vocab", VOCAB, "--json", timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["prompt_tokens"], [])
        self.assertEqual(len(out["tokens"]), 5)

    def test_bf16_training_and_a_bf16_export_that_samples(self):
        """--precision bf16 trains (its losses near fp32's, not equal), its weights export as
        BF16 with each value fp32's rounded to nearest even (checked by hand here), the bf16 file
        loads for sampling, and a precision that is neither is bad input naming the flag. On a
        CPU without AVX-512 (and with KILN_OPS_ISA=avx2 on one with it) the products are widened to f32,
        and the run says so."""
        fp32 = self.train_json("--max-steps", "3", "--val-every", "0",
                               "--export", self.path("fp32.safetensors"))
        bf16 = self.train_json("--max-steps", "3", "--val-every", "0", "--precision", "bf16",
                               "--export", self.path("trained.safetensors"))
        for a, b in zip(fp32[:3], bf16[:3]):
            self.assertAlmostEqual(a["loss"], b["loss"], delta=0.01 * a["loss"])
        self.assertNotEqual([x["loss"] for x in fp32[:3]], [x["loss"] for x in bf16[:3]])
        widened = run_kiln("train", self.config, "--json", "--peak-gflops", "100", "--max-steps",
                           "1", "--val-every", "0", "--precision", "bf16", timeout=TIMEOUT_S,
                           env=dict(os.environ, KILN_OPS_ISA="avx2"))
        self.assertEqual(widened.returncode, 0, widened.stderr)
        self.assertIn("bf16 matrix products are widened to f32 here", widened.stderr)
        first = json.loads(widened.stdout.splitlines()[0])
        # The same rounded inputs and f32 sums in another order: far closer than bf16 to fp32.
        self.assertAlmostEqual(first["loss"], bf16[0]["loss"], delta=1e-4 * bf16[0]["loss"])
        half = self.path("trained-bf16.safetensors")
        r = run_kiln("export", self.config, "--weights", self.path("trained.safetensors"),
                     "--dtype", "bf16", "--out", half, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        full_header, full_data = read_safetensors(self.path("trained.safetensors"))
        half_header, half_data = read_safetensors(half)
        self.assertEqual(half_header["__metadata__"], full_header["__metadata__"])
        for name in ("wte.weight", "h.1.mlp.fc.weight", "ln_f.bias"):
            self.assertEqual(half_header[name]["dtype"], "BF16")
            self.assertEqual(half_header[name]["shape"], full_header[name]["shape"])
            begin, end = half_header[name]["data_offsets"]
            got = struct.unpack(f"<{(end - begin) // 2}H", half_data[begin:end])
            want = []
            for x in tensor_values(full_header, full_data, name):
                (bits,) = struct.unpack("<I", struct.pack("<f", x))
                want.append(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF)
            self.assertEqual(list(got), want, name)
        r = run_kiln("sample", "--weights", half, "--tokens", "5", "--encoder", ENCODER,
                     "--vocab", VOCAB, "--json", timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(json.loads(r.stdout)["tokens"]), 5)
        r = run_kiln("train", self.config, "--precision", "fp16", timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--precision: 'fp16' is not a precision: fp32 or bf16", r.stderr)

    def test_bad_weights_file_is_an_error_naming_it(self):
        garbage = self.path("garbage.safetensors")
        with open(garbage, "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
        r = run_kiln("sample", "--weights", garbage, "--encoder", ENCODER, "--vocab", VOCAB,
                     timeout=TIMEOUT_S)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(garbage, r.stderr)
        self.assertEqual(r.stdout, "")
        r = run_kiln("sample", "--weights", self.path("absent.safetensors"), "--encoder",
                     ENCODER, "--vocab", VOCAB, timeout=TIMEOUT_S)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("absent.safetensors", r.stderr)


if __name__ == "__main__":
    unittest.main()
