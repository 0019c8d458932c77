# Every third-party library Kiln links, all from Debian 12 (scripts/install-deps installs them).
# Each one gets a line in docs/ARCHITECTURE.md saying why it is here.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(prometheus-cpp REQUIRED COMPONENTS core)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# OpenBLAS, threaded build (the system's libopenblas.so.0). kiln_ops calls sgemm from every
# thread of its own pool at once, which only the threaded build supports (the serial build's
# buffer allocation is not thread-safe); it runs single-threaded inside each task. The `kiln`
# binary makes sure OpenBLAS starts no threads of its own (src/cli/main.cc says why).
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# oneDNN (libdnnl-dev): the other GEMM library kiln_ops races against OpenBLAS on each machine
# (kiln/ops/gemm_library.h); it dispatches on ISA flags, so it runs the CPU's best kernels on
# models OpenBLAS's table does not know. Debian builds it on OpenMP, whose omp_set_num_threads
# kiln_ops calls to keep it to one thread per task.
find_package(dnnl REQUIRED CONFIG)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(OpenSSL REQUIRED)
find_package(SQLite3 REQUIRED)  # the coordinator's state store (kiln_sched_state)

if(KILN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

message(STATUS "kiln: fmt ${fmt_VERSION}, spdlog ${spdlog_VERSION}, yaml-cpp ${yaml-cpp_VERSION}, "
               "cpp-httplib ${HTTPLIB_VERSION}, xxhash ${XXHASH_VERSION}, oneDNN ${dnnl_VERSION}")
