# Data parallelism over kiln_comm: overlapped gradient buckets, ZeRO-1.
list(APPEND KILN_TRAIN_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data_parallel.cc)
list(APPEND KILN_TRAIN_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/data_parallel_test.cc
     ${PROJECT_SOURCE_DIR}/src/comm/testing/comm_test_util.cc)
