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

# Token shards and the trainer's YAML config come from users: fuzz their readers.
if(KILN_BUILD_TESTS)
  include(KilnFuzz)
  kiln_fuzz_target(NAME token_shard
    SOURCES shard_fuzz.cc shard.cc ../base/checksum.cc ../base/file_system.cc ../base/clock.cc
    SEED_SOURCES shard_fuzz_seeds.cc shard.cc ../base/checksum.cc ../base/file_system.cc ../base/clock.cc
    LIBS -lxxhash
    MAX_TOTAL_TIME 15)
  kiln_fuzz_target(NAME train_config
    SOURCES train_config_fuzz.cc train_config.cc precision.cc ../base/config.cc
    SEED_SOURCES train_config_fuzz_seeds.cc
    LIBS -lyaml-cpp
    MAX_TOTAL_TIME 15)
endif()
