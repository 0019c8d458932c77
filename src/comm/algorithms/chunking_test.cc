#include <gtest/gtest.h>

#include "comm/algorithms/chunking.h"

namespace kiln::comm {
namespace {

TEST(ChunkingTest, EvenRangesTileTheBufferWithSizesDifferingByAtMostOne) {
  for (size_t count : {0u, 1u, 7u, 8u, 4099u, 100000u}) {
    for (size_t parts = 1; parts <= 9; ++parts) {
      size_t next = 0;
      for (size_t i = 0; i < parts; ++i) {
        Range r = even_range(count, parts, i);
        EXPECT_EQ(r.offset, next) << count << "/" << parts << " #" << i;
        EXPECT_LE(r.count, count / parts + 1);
        EXPECT_GE(r.count, count / parts);
        next += r.count;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(ChunkingTest, PiecesCoverAChunkAndThenComeOutEmpty) {
  const Range chunk{100, 10};
  EXPECT_EQ(piece_count(10, 4), 3u);
  EXPECT_EQ(piece_count(0, 4), 0u);
  EXPECT_EQ(piece_count(8, 4), 2u);
  Range p0 = piece_of(chunk, 4, 0);
  Range p2 = piece_of(chunk, 4, 2);
  Range p3 = piece_of(chunk, 4, 3);
  EXPECT_EQ(p0.offset, 100u);
  EXPECT_EQ(p0.count, 4u);
  EXPECT_EQ(p2.offset, 108u);
  EXPECT_EQ(p2.count, 2u);
  EXPECT_EQ(p3.count, 0u);
  EXPECT_EQ(p3.offset, 110u);
}

TEST(ChunkingTest, HugeCountsDoNotOverflow) {
  const size_t count = (size_t{1} << 33) + 3;  // more than 2^31 elements
  Range last = even_range(count, 3, 2);
  EXPECT_EQ(last.offset + last.count, count);
  EXPECT_EQ(elements_per_message(64 << 10, 2), 32768u);
  EXPECT_EQ(elements_per_message(4, 8), 1u);
}

}  // namespace
}  // namespace kiln::comm
