# The model part of kiln_train (see CMakeLists.txt): GPT-2's parameter layout, forward, backward,
# initialisation, AdamW step and safetensors export; its tests; the step benchmark.
list(APPEND KILN_TRAIN_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/model.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_layout.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_init.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_forward.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_backward.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_io.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_precision.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/precision.cc)
list(APPEND KILN_TRAIN_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/model_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_grad_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_precision_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_io_test.cc)

# The allocation test counts every heap allocation around a training step, so it replaces the
# global operator new and wraps the C allocator (ld --wrap: every malloc call from our static
# libraries, kiln_ops' kernels included, goes through the counting __wrap_malloc). Both would
# affect any other test in a shared binary, hence a binary of its own.
kiln_tests(NAME model_alloc
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_alloc_test.cc
  DEPS kiln_train)
if(TARGET kiln_model_alloc_tests)
  target_link_options(kiln_model_alloc_tests PRIVATE
    -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free)
endif()

# kiln_model_step_bench: tokens/s of one forward + backward + AdamW step of a config (tiny by
# default) on 1 and 2 threads, with a per-op breakdown. Not a test: timings stay out of ctest.
add_executable(kiln_model_step_bench ${PROJECT_SOURCE_DIR}/bench/train/model_step_bench.cc)
target_include_directories(kiln_model_step_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(kiln_model_step_bench PRIVATE ${KILN_WARNINGS})
target_link_libraries(kiln_model_step_bench PRIVATE kiln_train)
