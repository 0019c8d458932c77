# The data part of kiln_train (see CMakeLists.txt): Kiln's PRNG, token shards, the data loader.
list(APPEND KILN_TRAIN_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rng.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/shard.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/loader.cc)
list(APPEND KILN_TRAIN_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/rng_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/shard_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/shard_write_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/loader_test.cc)

# next() must not allocate; counting allocations replaces the global operator new, which would
# affect any other test in a shared binary, hence a binary of its own.
kiln_tests(NAME loader_alloc
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/loader_alloc_test.cc
  DEPS kiln_train)
