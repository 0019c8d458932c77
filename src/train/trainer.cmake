# The trainer part of kiln_train (see CMakeLists.txt): config, LR schedule, the step loop and its
# output (JSON lines, progress line, metrics, debug dump), sampling and export.
list(APPEND KILN_TRAIN_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/train_config.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/schedule.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_checkpoint.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_debug_dump.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_json.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_metrics.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_progress.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/sampler.cc)
list(APPEND KILN_TRAIN_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/train_config_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/schedule_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_checkpoint_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_output_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/sampler_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/trainer_precision_test.cc)

# A step allocates nothing: the test replaces the global operator new to count, which would touch
# every other test of a shared binary, hence a binary of its own (as model_alloc's).
kiln_tests(NAME trainer_alloc
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer_alloc_test.cc
  DEPS kiln_train)
if(TARGET kiln_trainer_alloc_tests)
  target_compile_definitions(kiln_trainer_alloc_tests PRIVATE KILN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
