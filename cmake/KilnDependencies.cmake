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
find_package(OpenSSL REQUIRED)

if(KILN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

message(STATUS "kiln: fmt ${fmt_VERSION}, spdlog ${spdlog_VERSION}, yaml-cpp ${yaml-cpp_VERSION}, "
               "cpp-httplib ${HTTPLIB_VERSION}, xxhash ${XXHASH_VERSION}")
