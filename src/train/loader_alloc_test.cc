// Heap allocations in DataLoader::next(), counted: there must be none, epoch boundaries (the
// in-place reshuffle) included. The loader's memory is allocated once in open() (see loader.h).
//
// The global operator new is replaced to count (the loader's containers all allocate through
// it), which would affect every other test in a shared binary, hence a binary of its own
// (data.cmake).
#include <kiln/train/loader.h>

#include <gtest/gtest.h>

#include <kiln/train/shard.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <numeric>
#include <vector>

#include "base/testing/temp_path.h"

// The counter of the operators below: test instrumentation, which has to be global (operator
// new has nowhere else to find it).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_malloc(size_t size) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t size) {
  return counted_malloc(size);
}
void* operator new[](size_t size) {
  return counted_malloc(size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}

namespace kiln::train {
namespace {

TEST(LoaderAllocTest, NextAllocatesNothingAcrossEpochs) {
  const std::string dir = kiln::testing::unique_temp_dir("data");
  {
    Result<ShardWriter> writer = ShardWriter::create(dir, 700);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    std::vector<uint32_t> stream(2001);
    std::iota(stream.begin(), stream.end(), 0u);
    ASSERT_TRUE(writer->append(stream).ok());
    ASSERT_TRUE(writer->finish().ok());
  }
  for (bool shuffle : {true, false}) {
    LoaderConfig config;
    config.dir = dir;
    config.batch = 4;
    config.seq = 16;  // W = 125 windows, 31 batches of 4 per epoch
    config.seed = 3;
    config.shuffle = shuffle;
    Result<DataLoader> loader = DataLoader::open(config);
    ASSERT_TRUE(loader.ok()) << loader.status().to_string();
    std::vector<int32_t> inputs(4 * 16), targets(4 * 16);
    g_allocations = 0;
    g_counting = true;
    for (int step = 0; step < 100; ++step)  // three epoch boundaries
      loader->next(inputs, targets);
    const Status seek = loader->seek({7, 0});
    loader->next(inputs, targets);
    g_counting = false;
    EXPECT_TRUE(seek.ok());
    EXPECT_EQ(loader->position().epoch, 7u);
    EXPECT_EQ(g_allocations.load(), 0) << "shuffle=" << shuffle;
  }
  // The counter works: an allocation is seen.
  g_allocations = 0;
  g_counting = true;
  std::vector<int>* probe = new std::vector<int>(10);
  g_counting = false;
  delete probe;
  EXPECT_GE(g_allocations.load(), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::train
