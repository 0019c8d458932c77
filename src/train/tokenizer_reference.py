#!/usr/bin/env python3
"""GPT-2's tokenizer as OpenAI's encoder.py writes it: the independent reference Kiln's C++
tokenizer is checked against. It produced the corpus digest in tokenizer_test.cc.

  python3 src/train/tokenizer_reference.py digest          # the SOTU corpus: files, tokens, FNV-1a
  python3 src/train/tokenizer_reference.py encode < text   # ids of stdin (UTF-8) as a JSON array
  python3 src/train/tokenizer_reference.py fuzz N SEED     # N random strings vs `kiln encode`
                                                           # (KILN=path, default build/release/bin/kiln)

Needs the `regex` module (pip install regex, or Debian's python3-regex), as encoder.py does;
run from the repository root (it reads data/gpt2/ and data/sotu/raw/).

The digest: every file of data/sotu/raw/train/ then data/sotu/raw/val/, each sorted by name,
each encoded on its own; the token count and the FNV-1a 64-bit hash of all ids as 4-byte
little-endian integers, in that order.

Character classes: `regex` follows a newer Unicode than Kiln's tables (Unicode 14.0, see
tokenizer_unicode_gen.py), so `fuzz` draws only code points assigned in Unicode 14.0.
"""
import glob
import json
import os
import random
import subprocess
import sys
import unicodedata

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Encoder:
    def __init__(self, encoder_path="data/gpt2/encoder.json", vocab_path="data/gpt2/vocab.bpe"):
        with open(encoder_path, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(vocab_path, encoding="utf-8") as f:
            merges = f.read().split("\n")[1:-1]
        self.bpe_ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for piece in regex.findall(PATTERN, text):
            piece = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(piece))
        return ids


def fnv1a(ids, h=FNV_OFFSET):
    for i in ids:
        for byte in i.to_bytes(4, "little"):
            h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def digest():
    enc = Encoder()
    files = (sorted(glob.glob("data/sotu/raw/train/*.txt")) +
             sorted(glob.glob("data/sotu/raw/val/*.txt")))
    tokens, h, size = 0, FNV_OFFSET, 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        ids = enc.encode(data.decode("utf-8"))
        tokens += len(ids)
        size += len(data)
        h = fnv1a(ids, h)
    print(f"files {len(files)} bytes {size} tokens {tokens} fnv1a64 0x{h:016x}")


def random_text(rng, assigned):
    pieces = []
    for _ in range(rng.randrange(1, 40)):
        kind = rng.random()
        if kind < 0.3:
            pieces.append(rng.choice([" ", "  ", "\n", "\n\n", "\t", " \n ", "\u3000", "\u00a0",
                                      "'s", "'re", "'ll", "'", "''", "<|endoftext|>"]))
        elif kind < 0.6:
            pieces.append("".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(rng.randrange(8))))
        else:
            pieces.append("".join(rng.choice(assigned) for _ in range(rng.randrange(6))))
    return "".join(pieces)


def fuzz(n, seed):
    kiln = os.environ.get("KILN", "build/release/bin/kiln")
    enc = Encoder()
    rng = random.Random(seed)
    assigned = [chr(c) for c in range(0x80, 0x30000)
                if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    texts = [random_text(rng, assigned) for _ in range(n)]
    bad = 0
    for text in texts:
        want = enc.encode(text)
        r = subprocess.run([kiln, "encode", "--no-special"], input=text.encode("utf-8"),
                           capture_output=True, check=True)
        got = json.loads(r.stdout)
        if got != want:
            bad += 1
            print(f"MISMATCH {text!r}\n  kiln      {got}\n  reference {want}")
    print(f"{n} strings, {bad} mismatches")
    return 1 if bad else 0


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "digest":
        digest()
    elif cmd == "encode":
        print(json.dumps(Encoder().encode(sys.stdin.buffer.read().decode("utf-8"))))
    elif cmd == "fuzz" and len(sys.argv) == 4:
        return fuzz(int(sys.argv[2]), int(sys.argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
