# The parts of kiln_ckpt (see CMakeLists.txt).
list(APPEND KILN_CKPT_SOURCES safetensors.cc)
list(APPEND KILN_CKPT_TESTS safetensors_fault_test.cc safetensors_test.cc)
# Checkpoints (docs/ckpt.md): shards, manifest and commit, catalog, asynchronous writer.
list(APPEND KILN_CKPT_SOURCES
  async_checkpointer.cc
  catalog.cc
  checkpoint.cc
  file_io.cc
  manifest.cc
  shard.cc
  staging_buffer.cc)
list(APPEND KILN_CKPT_TESTS
  async_checkpointer_test.cc
  catalog_test.cc
  checkpoint_fault_test.cc
  checkpoint_test.cc
  manifest_test.cc)

# Manifests and shard headers come from disks other processes wrote: fuzz their decoders.
if(KILN_BUILD_TESTS)
  include(KilnFuzz)
  # What decode_manifest and its seeds' encode_manifest reach (shard names, checksums).
  set(KILN_CKPT_MANIFEST_FUZZ_SOURCES manifest.cc checkpoint.cc file_io.cc shard.cc safetensors.cc
      ../base/json.cc ../base/checksum.cc ../base/clock.cc ../base/file_system.cc)
  kiln_fuzz_target(NAME manifest
    SOURCES manifest_fuzz.cc ${KILN_CKPT_MANIFEST_FUZZ_SOURCES}
    SEED_SOURCES manifest_fuzz_seeds.cc ${KILN_CKPT_MANIFEST_FUZZ_SOURCES}
    LIBS -lxxhash
    MAX_TOTAL_TIME 15)
  kiln_fuzz_target(NAME safetensors_header
    SOURCES safetensors_fuzz.cc safetensors.cc ../base/json.cc ../base/file_system.cc ../base/checksum.cc ../base/clock.cc
    SEED_SOURCES safetensors_fuzz_seeds.cc safetensors.cc ../base/json.cc ../base/file_system.cc ../base/checksum.cc ../base/clock.cc
    LIBS -lxxhash
    MAX_TOTAL_TIME 15)
endif()
