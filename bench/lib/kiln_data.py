"""Kiln's token shards and data-loader order, in plain Python (numpy), for the PyTorch side.

bench/train/torch_train.py trains on exactly the windows `kiln train` does, in the same order,
without asking Kiln for them: this module reads the shards `kiln tokenize` writes
(include/kiln/train/shard.h) and re-implements the loader's order (include/kiln/train/loader.h)
and the PRNG behind it (include/kiln/train/rng.h: splitmix64, derive_seed, xoshiro256**,
Lemire's next_below). tests/train/golden_parity.py checks the batches against the ones
`kiln train --debug-dump` recorded.

Invariants (the C++ ones, restated):
- A data directory is every *.bin in it, sorted by name, concatenated into one stream of N
  tokens. Window w is tokens [w*T, w*T + T + 1); W = (N - 1) // T windows per epoch.
- Epoch e visits windows in a Fisher-Yates (Durstenfeld) shuffle of 0..W-1 drawn from
  Rng(derive_seed(seed, e)), the identity when shuffle is off. A global batch is the next
  world*B windows of that order; rank r takes [p + r*B, p + r*B + B). When fewer than world*B
  windows remain, the next epoch starts at window 0.
- All integer arithmetic is modulo 2^64 (masked), as the C++ uint64_t is.
The shard checksum (XXH3-64) is not verified here: `kiln train` verifies it on every open, and
Python has no XXH3 without a package; the header's sizes are checked.
"""
import glob
import os
import struct

import numpy as np

MASK64 = (1 << 64) - 1
SHARD_MAGIC = b"KILNTOK1"
SHARD_VERSION = 1
SHARD_HEADER_BYTES = 32
# magic (8 bytes), version (u32), header_bytes (u32), token_count (u64), checksum (u64)
SHARD_HEADER = struct.Struct("<8sIIQQ")


def splitmix64(state):
    """One splitmix64 step: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64  # 2^64 / golden ratio
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def derive_seed(seed, stream):
    """The seed of stream `stream` of `seed` (rng.cc's derive_seed)."""
    _, mixed = splitmix64(seed & MASK64)
    _, out = splitmix64((mixed + stream) & MASK64)
    return out


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK64


class Rng:
    """xoshiro256** seeded with four splitmix64 outputs of the seed (rng.cc's Rng)."""

    def __init__(self, seed):
        state = seed & MASK64
        self.s = []
        for _ in range(4):
            state, word = splitmix64(state)
            self.s.append(word)

    def next_u64(self):
        s = self.s
        result = (_rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def next_below(self, bound):
        """Uniform in [0, bound) by Lemire's multiply-and-reject, as rng.cc draws it."""
        if bound <= 0:
            raise ValueError(f"next_below({bound}) has no value to return")
        m = self.next_u64() * bound
        low = m & MASK64
        if low < bound:
            threshold = ((1 << 64) - bound) % bound  # 2^64 mod bound
            while low < threshold:
                m = self.next_u64() * bound
                low = m & MASK64
        return m >> 64


def read_shard(path):
    """The tokens of one shard (np.uint16). Raises ValueError naming the file for a bad magic,
    version, header size or length."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < SHARD_HEADER_BYTES:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the {SHARD_HEADER_BYTES}-byte "
                         f"shard header")
    magic, version, header_bytes, count, _checksum = SHARD_HEADER.unpack_from(data)
    if magic != SHARD_MAGIC or version != SHARD_VERSION or header_bytes != SHARD_HEADER_BYTES:
        raise ValueError(f"{path}: not a version-{SHARD_VERSION} Kiln token shard (magic "
                         f"{magic!r}, version {version}, header {header_bytes} bytes)")
    if len(data) != header_bytes + 2 * count:
        raise ValueError(f"{path}: {len(data)} bytes, but the header says {count} tokens "
                         f"({header_bytes + 2 * count} bytes)")
    return np.frombuffer(data, dtype="<u2", count=count, offset=header_bytes)


def read_stream(directory):
    """Every *.bin of `directory`, sorted by name, concatenated (np.uint16)."""
    paths = sorted(glob.glob(os.path.join(directory, "*.bin")))
    if not paths:
        raise FileNotFoundError(f"{directory}: no *.bin shard (run scripts/fetch-data)")
    return np.concatenate([read_shard(p) for p in paths])


class Loader:
    """DataLoader's order over an already read stream. next() returns (inputs, targets), each a
    (B, T) np.int64 array (torch's index dtype)."""

    def __init__(self, tokens, batch, seq, seed, shuffle=True, rank=0, world=1):
        if batch < 1 or seq < 1 or world < 1 or not 0 <= rank < world:
            raise ValueError(f"bad loader shape: batch {batch} seq {seq} rank {rank} world "
                             f"{world}")
        self.tokens = tokens
        self.batch, self.seq, self.seed = batch, seq, seed
        self.shuffle, self.rank = shuffle, rank
        self.windows = (len(tokens) - 1) // seq if len(tokens) else 0
        self.global_batch = world * batch
        if self.windows < self.global_batch:
            raise ValueError(f"{len(tokens)} tokens make {self.windows} windows of {seq + 1} "
                             f"tokens, fewer than one global batch of {self.global_batch}")
        # Each row b of a batch is tokens[id * T + offsets]: one gather per batch.
        self.offsets = np.arange(seq + 1, dtype=np.int64)
        self.order = None
        self.start_epoch(0)

    def start_epoch(self, epoch):
        self.epoch, self.window = epoch, 0
        if not self.shuffle:
            return
        order = list(range(self.windows))
        rng = Rng(derive_seed(self.seed, epoch))
        for i in range(self.windows, 1, -1):
            j = rng.next_below(i)
            order[i - 1], order[j] = order[j], order[i - 1]
        self.order = np.asarray(order, dtype=np.int64)

    def rewind(self):
        """Back to the start of epoch 0 (the trainer's validation seek)."""
        self.start_epoch(0)

    def next(self):
        first = self.window + self.rank * self.batch
        index = np.arange(first, first + self.batch, dtype=np.int64)
        ids = self.order[index] if self.shuffle else index
        rows = self.tokens[ids[:, None] * self.seq + self.offsets[None, :]].astype(np.int64)
        self.window += self.global_batch
        if self.window + self.global_batch > self.windows:
            self.start_epoch(self.epoch + 1)
        return rows[:, :-1], rows[:, 1:]
