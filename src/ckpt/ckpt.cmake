# The parts of kiln_ckpt (see CMakeLists.txt).
list(APPEND KILN_CKPT_SOURCES safetensors.cc)
list(APPEND KILN_CKPT_TESTS safetensors_test.cc)
