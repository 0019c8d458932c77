#!/usr/bin/env python3
"""Tests of bench/lib/kiln_data.py against the values Kiln's own tests pin.

  /usr/bin/python3 bench/lib/kiln_data_test.py [-v]

What torch_train.py relies on: the PRNG is Kiln's bit for bit (src/train/rng_test.cc's
reference sequences), the shuffle gives the windows src/train/loader_test.cc pins, epochs roll
over as the C++ loader's do, and a shard is read exactly (header checked, tokens little-endian).
tests/train/golden_parity.py checks the whole order against a real `kiln train` run.
"""
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_data  # noqa: E402


class RngTest(unittest.TestCase):
    def test_splitmix64_reference(self):
        state, outs = 0, []
        for _ in range(4):
            state, out = kiln_data.splitmix64(state)
            outs.append(out)
        self.assertEqual(outs, [0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f,
                                0xf88bb8a8724c81ec])

    def test_xoshiro_reference_and_seed_zero(self):
        rng = kiln_data.Rng(0)
        self.assertEqual((rng.s[0], rng.s[3]), (0xe220a8397b1dcdaf, 0xf88bb8a8724c81ec))
        self.assertEqual([rng.next_u64() for _ in range(3)],
                         [0x99ec5f36cb75f2b4, 0xbf6e1f784956452a, 0x1a5f849d4933e6e0])
        rng.s = [1, 2, 3, 4]
        self.assertEqual([rng.next_u64() for _ in range(4)],
                         [11520, 0, 1509978240, 1215971899390074240])

    def test_next_below_bounds(self):
        rng = kiln_data.Rng(7)
        draws = [rng.next_below(3) for _ in range(300)]
        self.assertEqual(set(draws), {0, 1, 2})
        self.assertEqual(rng.next_below(1), 0)
        with self.assertRaises(ValueError):
            rng.next_below(0)


class LoaderTest(unittest.TestCase):
    # src/train/loader_test.cc: tokens 0..1000, T = 10 (W = 100), batch 12, seed 1337.
    TOKENS = np.arange(1001, dtype=np.uint16)

    def windows(self, loader):
        inputs, targets = loader.next()
        np.testing.assert_array_equal(targets, inputs + 1)
        self.assertTrue(np.all(inputs[:, 0] % 10 == 0))
        return [int(x) // 10 for x in inputs[:, 0]]

    def test_pinned_fisher_yates_order(self):
        loader = kiln_data.Loader(self.TOKENS, 12, 10, 1337)
        self.assertEqual(self.windows(loader), [90, 14, 5, 99, 10, 94, 49, 41, 30, 18, 24, 35])
        loader.start_epoch(1)
        self.assertEqual(self.windows(loader), [43, 13, 52, 36, 56, 66, 28, 64, 77, 44, 19, 58])

    def test_unshuffled_epochs_roll_over(self):
        loader = kiln_data.Loader(self.TOKENS, 3, 10, 1337, shuffle=False)
        for s in range(33):  # 99 of the 100 windows; the last one cannot fill a batch
            self.assertEqual(self.windows(loader), [3 * s, 3 * s + 1, 3 * s + 2])
        self.assertEqual((loader.epoch, loader.window), (1, 0))
        self.assertEqual(self.windows(loader), [0, 1, 2])

    def test_every_window_once_per_epoch(self):
        loader = kiln_data.Loader(self.TOKENS, 10, 10, 5)
        seen = sorted(w for _ in range(10) for w in self.windows(loader))
        self.assertEqual(seen, list(range(100)))
        self.assertEqual(loader.epoch, 1)

    def test_ranks_take_their_slice(self):
        whole = kiln_data.Loader(self.TOKENS, 4, 10, 9)
        halves = [kiln_data.Loader(self.TOKENS, 2, 10, 9, rank=r, world=2) for r in (0, 1)]
        for _ in range(5):
            self.assertEqual(self.windows(whole),
                             self.windows(halves[0]) + self.windows(halves[1]))

    def test_too_few_windows(self):
        with self.assertRaises(ValueError):
            kiln_data.Loader(np.arange(20, dtype=np.uint16), 4, 10, 1)


class ShardTest(unittest.TestCase):
    def write(self, directory, name, tokens, count=None, magic=b"KILNTOK1"):
        data = np.asarray(tokens, dtype="<u2").tobytes()
        header = struct.pack("<8sIIQQ", magic, 1, 32, len(tokens) if count is None else count, 0)
        with open(os.path.join(directory, name), "wb") as fh:
            fh.write(header + data)

    def test_stream_is_the_sorted_shards(self):
        with tempfile.TemporaryDirectory(prefix="kiln-data-test-") as tmp:
            self.write(tmp, "shard_000001.bin", [3, 65535])
            self.write(tmp, "shard_000000.bin", [50256, 1, 2])
            self.write(tmp, "ignored.txt", [9])
            np.testing.assert_array_equal(kiln_data.read_stream(tmp), [50256, 1, 2, 3, 65535])

    def test_bad_shards_are_named(self):
        with tempfile.TemporaryDirectory(prefix="kiln-data-test-") as tmp:
            self.write(tmp, "short.bin", [1, 2], count=3)
            with self.assertRaisesRegex(ValueError, "short.bin.*3 tokens"):
                kiln_data.read_shard(os.path.join(tmp, "short.bin"))
            self.write(tmp, "magic.bin", [1], magic=b"NOTKILN1")
            with self.assertRaisesRegex(ValueError, "magic.bin.*not a version-1"):
                kiln_data.read_shard(os.path.join(tmp, "magic.bin"))
            with self.assertRaisesRegex(FileNotFoundError, "fetch-data"):
                kiln_data.read_stream(os.path.join(tmp, "none"))


if __name__ == "__main__":
    unittest.main()
