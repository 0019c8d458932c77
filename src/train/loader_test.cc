// Tests of the data loader's contract (include/kiln/train/loader.h): windows and targets, the
// seeded global order, rank slices, epochs, position/seek across epochs and world sizes, and
// errors that name the shard at fault. The synthetic stream holds token i at position i, so a
// row's first input identifies its window: w = inputs[b*T] / T.
#include <kiln/train/loader.h>

#include <gtest/gtest.h>

#include <kiln/train/shard.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln::train {
namespace {

// 1001 tokens at T = 10 make exactly W = 100 windows; shards of 300 tokens put shard boundaries
// inside windows.
constexpr uint32_t kStreamTokens = 1001;
constexpr int kSeq = 10;
constexpr uint64_t kWindows = 100;

using Windows = std::vector<uint64_t>;  // window ids of one rank's batch, row by row

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kiln::testing::unique_temp_dir("data");
    write_stream(dir_, kStreamTokens, 300);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void write_stream(const std::string& dir, uint32_t n, uint64_t shard_tokens) {
    Result<ShardWriter> writer = ShardWriter::create(dir, shard_tokens);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    std::vector<uint32_t> stream(n);
    std::iota(stream.begin(), stream.end(), 0u);
    ASSERT_TRUE(writer->append(stream).ok());
    ASSERT_TRUE(writer->finish().ok());
  }

  LoaderConfig config(int batch, int rank = 0, int world = 1, uint64_t seed = 1337,
                      bool shuffle = true) const {
    LoaderConfig c;
    c.dir = dir_;
    c.batch = batch;
    c.seq = kSeq;
    c.rank = rank;
    c.world = world;
    c.seed = seed;
    c.shuffle = shuffle;
    return c;
  }

  static DataLoader open_ok(const LoaderConfig& c) {
    Result<DataLoader> loader = DataLoader::open(c);
    KILN_CHECK(loader.ok()) << loader.status().to_string();
    return std::move(loader).value();
  }

  // One next(): checks every row is a whole window with targets = inputs shifted by one, and
  // returns the rows' window ids.
  static Windows step(DataLoader& loader) {
    const int b_count = loader.config().batch;
    std::vector<int32_t> in(static_cast<size_t>(b_count * kSeq), -1);
    std::vector<int32_t> tgt(in.size(), -1);
    loader.next(in, tgt);
    Windows rows;
    for (int b = 0; b < b_count; ++b) {
      const int32_t first = in[static_cast<size_t>(b * kSeq)];
      EXPECT_EQ(first % kSeq, 0) << "row " << b << " does not start at a window boundary";
      for (int t = 0; t < kSeq; ++t) {
        const size_t i = static_cast<size_t>(b * kSeq + t);
        EXPECT_EQ(in[i], first + t);
        EXPECT_EQ(tgt[i], in[i] + 1);
      }
      rows.push_back(static_cast<uint64_t>(first / kSeq));
    }
    return rows;
  }

  static std::vector<Windows> steps(DataLoader& loader, int n) {
    std::vector<Windows> out;
    for (int i = 0; i < n; ++i)
      out.push_back(step(loader));
    return out;
  }

  // The global batches of `world` ranks stepping together: rank 0's rows, then rank 1's, ...
  std::vector<Windows> global_steps(int batch, int world, int n, const LoaderPosition* from,
                                    uint64_t seed = 1337) {
    std::vector<DataLoader> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(open_ok(config(batch, r, world, seed)));
      if (from != nullptr) {
        EXPECT_TRUE(ranks.back().seek(*from).ok());
      }
    }
    std::vector<Windows> out;
    for (int i = 0; i < n; ++i) {
      Windows global;
      for (DataLoader& rank : ranks) {
        const Windows w = step(rank);
        global.insert(global.end(), w.begin(), w.end());
      }
      out.push_back(global);
    }
    for (DataLoader& rank : ranks)
      EXPECT_EQ(rank.position(), ranks[0].position());
    return out;
  }

  std::string dir_;
};

TEST_F(LoaderTest, CountsTokensAndWindowsAcrossShards) {
  DataLoader loader = open_ok(config(4));
  EXPECT_EQ(loader.tokens(), kStreamTokens);
  EXPECT_EQ(loader.windows_per_epoch(), kWindows);
  EXPECT_EQ(loader.shard_paths().size(), 4u);  // 300 + 300 + 300 + 101
  EXPECT_EQ(loader.position(), (LoaderPosition{0, 0}));
}

TEST_F(LoaderTest, ShuffleOffGivesWindowsInOrderAndSkipsTheEpochTail) {
  // G = 3 does not divide W = 100: 33 batches cover windows 0..98, window 99 is skipped.
  DataLoader loader = open_ok(config(3, 0, 1, 1337, false));
  for (uint64_t s = 0; s < 33; ++s) {
    EXPECT_EQ(step(loader), (Windows{3 * s, 3 * s + 1, 3 * s + 2}));
  }
  EXPECT_EQ(loader.position(), (LoaderPosition{1, 0}));
  EXPECT_EQ(step(loader), (Windows{0, 1, 2}));
  EXPECT_EQ(loader.position(), (LoaderPosition{1, 3}));
}

TEST_F(LoaderTest, LastWindowEndsAtTheLastToken) {
  // N - 1 = 1000 = W * T exactly: window 99's last target is token 1000, the stream's last.
  DataLoader loader = open_ok(config(1, 0, 1, 1337, false));
  ASSERT_TRUE(loader.seek({0, 99}).ok());
  std::vector<int32_t> in(kSeq), tgt(kSeq);
  loader.next(in, tgt);
  EXPECT_EQ(in.front(), 990);
  EXPECT_EQ(tgt.back(), 1000);
}

TEST_F(LoaderTest, ShuffledEpochIsAPermutationAndEpochsDiffer) {
  DataLoader loader = open_ok(config(4));  // G = 4 divides W: 25 batches per epoch
  std::vector<Windows> epochs(2);
  for (Windows& epoch : epochs) {
    for (int s = 0; s < 25; ++s) {
      const Windows w = step(loader);
      epoch.insert(epoch.end(), w.begin(), w.end());
    }
    Windows sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    Windows all(kWindows);
    std::iota(all.begin(), all.end(), uint64_t{0});
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  Windows identity(kWindows);
  std::iota(identity.begin(), identity.end(), uint64_t{0});
  EXPECT_NE(epochs[0], identity);
  EXPECT_EQ(loader.position(), (LoaderPosition{2, 0}));
}

// The order is part of the on-disk contract (a checkpoint's position means nothing without it):
// Fisher-Yates from the last position down, j = next_below(i + 1), with
// Rng(derive_seed(seed, epoch)). The expected windows come from an independent Python
// transcription of splitmix64, xoshiro256**, Lemire's bounded draw and the shuffle.
TEST_F(LoaderTest, OrderIsThePinnedFisherYatesShuffle) {
  DataLoader loader = open_ok(config(12));
  EXPECT_EQ(step(loader), (Windows{90, 14, 5, 99, 10, 94, 49, 41, 30, 18, 24, 35}));
  ASSERT_TRUE(loader.seek({1, 0}).ok());
  EXPECT_EQ(step(loader), (Windows{43, 13, 52, 36, 56, 66, 28, 64, 77, 44, 19, 58}));
}

TEST_F(LoaderTest, SameSeedSameOrderDifferentSeedsDiffer) {
  DataLoader a = open_ok(config(4, 0, 1, 7));
  DataLoader b = open_ok(config(4, 0, 1, 7));
  DataLoader c = open_ok(config(4, 0, 1, 8));
  const std::vector<Windows> sa = steps(a, 60), sb = steps(b, 60), sc = steps(c, 60);
  EXPECT_EQ(sa, sb);  // 60 steps cross two epoch boundaries
  EXPECT_NE(sa, sc);
}

TEST_F(LoaderTest, RanksPartitionTheGlobalBatch) {
  // world 1 x B 12 == world 2 x B 6 == world 3 x B 4 == world 4 x B 3, row for row, for 30
  // steps (G = 12 leaves a 4-window tail: 8 batches per epoch, so this crosses 3 boundaries).
  const std::vector<Windows> one = global_steps(12, 1, 30, nullptr);
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    EXPECT_EQ(global_steps(12 / world, world, 30, nullptr), one);
  }
  for (const Windows& g : one) {
    EXPECT_EQ(std::set<uint64_t>(g.begin(), g.end()).size(), g.size()) << "a window repeats";
  }
}

TEST_F(LoaderTest, SeekResumesTheIdenticalSequence) {
  // Stop after k steps for k inside the epoch, just before the boundary and on it (G = 8:
  // 12 batches per epoch, window 96..99 skipped).
  for (int k : {0, 5, 11, 12, 13, 23}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    DataLoader a = open_ok(config(8));
    steps(a, k);
    const LoaderPosition pos = a.position();
    const std::vector<Windows> expected = steps(a, 20);
    DataLoader b = open_ok(config(8));
    steps(b, 3);  // a loader that is elsewhere, in order_ and in epoch, before seeking
    ASSERT_TRUE(b.seek(pos).ok());
    EXPECT_EQ(b.position(), pos);
    EXPECT_EQ(steps(b, 20), expected);
  }
}

TEST_F(LoaderTest, SeekResumesOnAnotherWorldSizeWithTheSameGlobalBatch) {
  // Two ranks with B = 4 stop after 17 steps (one epoch boundary crossed); one rank with B = 8
  // and four with B = 2 continue exactly where they would have.
  std::vector<DataLoader> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(open_ok(config(4, r, 2)));
  for (int s = 0; s < 17; ++s) {
    for (DataLoader& rank : ranks)
      step(rank);
  }
  const LoaderPosition pos = ranks[0].position();
  EXPECT_EQ(pos.epoch, 1u);
  const std::vector<Windows> expected = global_steps(4, 2, 15, &pos);
  EXPECT_EQ(global_steps(8, 1, 15, &pos), expected);
  EXPECT_EQ(global_steps(2, 4, 15, &pos), expected);
}

TEST_F(LoaderTest, SeekToATailWithoutAFullBatchStartsTheNextEpoch) {
  DataLoader loader = open_ok(config(8));
  ASSERT_TRUE(loader.seek({3, 95}).ok());  // 95 + 8 > 100
  EXPECT_EQ(loader.position(), (LoaderPosition{4, 0}));
  ASSERT_TRUE(loader.seek({3, 100}).ok());
  EXPECT_EQ(loader.position(), (LoaderPosition{4, 0}));
  ASSERT_TRUE(loader.seek({3, 92}).ok());  // 92 + 8 == 100: one batch left
  EXPECT_EQ(loader.position(), (LoaderPosition{3, 92}));
  const Status s = loader.seek({3, 101});
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find(dir_), std::string::npos);
}

TEST_F(LoaderTest, RejectsBadConfigs) {
  EXPECT_TRUE(DataLoader::open(config(0)).status().is_invalid_argument());
  EXPECT_TRUE(DataLoader::open(config(2, 2, 2)).status().is_invalid_argument());
  EXPECT_TRUE(DataLoader::open(config(2, -1, 2)).status().is_invalid_argument());
  LoaderConfig c = config(2);
  c.seq = 0;
  EXPECT_TRUE(DataLoader::open(c).status().is_invalid_argument());
  // 100 windows cannot fill one global batch of 2 x 51.
  const Status s = DataLoader::open(config(51, 0, 2)).status();
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("fewer than one global batch of 102"), std::string::npos)
      << s.to_string();
  EXPECT_TRUE(DataLoader::open(config(50, 1, 2)).ok());
}

// Shard errors surface from open() naming the file at fault.
class LoaderShardErrorTest : public LoaderTest {
 protected:
  std::string shard(int i) const { return dir_ + "/shard_00000" + std::to_string(i) + ".bin"; }
  std::string bytes(const std::string& p) const {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void put(const std::string& p, const std::string& b) const {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << b;
  }
  Status open_error() const {
    Result<DataLoader> loader = DataLoader::open(config(4));
    EXPECT_FALSE(loader.ok());
    return loader.status();
  }
};

TEST_F(LoaderShardErrorTest, CorruptByte) {
  std::string b = bytes(shard(2));
  b[100] ^= 0x40;
  put(shard(2), b);
  const Status s = open_error();
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find(shard(2) + ": checksum mismatch"), std::string::npos) << s.to_string();
}

TEST_F(LoaderShardErrorTest, TruncatedFile) {
  const std::string b = bytes(shard(1));
  put(shard(1), b.substr(0, b.size() - 10));
  const Status s = open_error();
  EXPECT_TRUE(s.is_corruption());
  EXPECT_EQ(s.message(),
            shard(1) + ": truncated: header says 300 tokens (600 bytes) but 590 bytes follow");
}

TEST_F(LoaderShardErrorTest, BadMagic) {
  std::string b = bytes(shard(3));
  b[0] = 'X';
  put(shard(3), b);
  const Status s = open_error();
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find(shard(3) + ": bad magic"), std::string::npos) << s.to_string();
}

TEST_F(LoaderShardErrorTest, EmptyDirectory) {
  for (int i = 0; i < 4; ++i)
    std::filesystem::remove(shard(i));
  const Status s = open_error();
  EXPECT_TRUE(s.is_not_found());
  EXPECT_NE(s.message().find(dir_), std::string::npos) << s.to_string();
}

// The real corpus `scripts/fetch-data` tokenizes with `kiln tokenize`: every shard verifies,
// every id is a GPT-2 id, and the stream starts with the end-of-text separator GPT-2 puts
// before each document.
TEST(LoaderDataTest, SotuShardsVerify) {
  for (const char* split : {"train", "val"}) {
    const std::string dir = std::string(KILN_SOURCE_DIR) + "/data/sotu/" + split;
    ASSERT_TRUE(std::filesystem::exists(dir + "/.complete"))
        << dir << " is missing: run scripts/fetch-data";
    LoaderConfig c;
    c.dir = dir;
    c.batch = 8;
    c.seq = 256;
    Result<DataLoader> loader = DataLoader::open(c);
    ASSERT_TRUE(loader.ok()) << loader.status().to_string();
    EXPECT_GT(loader->tokens(), 100'000u) << dir;
    constexpr int32_t kGpt2Vocab = 50257;
    constexpr int32_t kEndOfTextId = 50256;
    std::vector<int32_t> in(8 * 256), tgt(8 * 256);
    c.shuffle = false;
    Result<DataLoader> ordered = DataLoader::open(c);
    ASSERT_TRUE(ordered.ok());
    ordered->next(in, tgt);
    EXPECT_EQ(in[0], kEndOfTextId) << dir;
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_GE(in[i], 0);
      ASSERT_LT(in[i], kGpt2Vocab);
    }
  }
}

}  // namespace
}  // namespace kiln::train

namespace kiln::train {
namespace {

// Issue 10: an id beyond the vocabulary was found only when its window was drawn, naming
// neither shard nor position.
TEST_F(LoaderShardErrorTest, ATokenBeyondTheVocabularyNamesItsShardAndPosition) {
  LoaderConfig c = config(4);
  c.vocab_size = 950;  // the stream holds token i at i: shard 3 (900..1000) holds 950 at 50
  Result<DataLoader> loader = DataLoader::open(c);
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(loader.status().is_corruption());
  EXPECT_EQ(loader.status().message(),
            shard(3) + ": token 950 at position 50 is outside the vocabulary (vocab_size 950)");
  c.vocab_size = 1001;  // every token fits
  EXPECT_TRUE(DataLoader::open(c).ok());
}

}  // namespace
}  // namespace kiln::train
