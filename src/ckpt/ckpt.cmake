# The parts of kiln_ckpt (see CMakeLists.txt).
list(APPEND KILN_CKPT_SOURCES safetensors.cc)
list(APPEND KILN_CKPT_TESTS safetensors_test.cc)
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
  checkpoint_test.cc
  manifest_test.cc)
