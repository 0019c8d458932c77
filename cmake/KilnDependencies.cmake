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
# OpenBLAS, serial build, linked statically (libopenblas-serial-dev). kiln_ops splits every GEMM
# over its own thread pool and calls sgemm single-threaded in each task, so OpenBLAS's threads
# would only idle; worse, the pthread build starts them when the library loads, before main()
# can block SIGINT/SIGTERM/SIGUSR1, and a process-directed signal landing on one of them takes
# the default action (kills the process) instead of reaching Kiln's signal thread. Static, so the
# system's libopenblas.so.0 alternative (the pthread build) is never picked up at run time.
set(KILN_OPENBLAS_SERIAL_DIR /usr/lib/x86_64-linux-gnu/openblas-serial)
find_library(KILN_OPENBLAS_SERIAL_LIB libopenblas.a PATHS ${KILN_OPENBLAS_SERIAL_DIR}
             NO_DEFAULT_PATH REQUIRED)
add_library(KilnOpenBLAS INTERFACE IMPORTED)
target_include_directories(KilnOpenBLAS SYSTEM INTERFACE
                           /usr/include/x86_64-linux-gnu/openblas-serial)
target_link_libraries(KilnOpenBLAS INTERFACE ${KILN_OPENBLAS_SERIAL_LIB} Threads::Threads m)
find_package(OpenSSL REQUIRED)

if(KILN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

message(STATUS "kiln: fmt ${fmt_VERSION}, spdlog ${spdlog_VERSION}, yaml-cpp ${yaml-cpp_VERSION}, "
               "cpp-httplib ${HTTPLIB_VERSION}, xxhash ${XXHASH_VERSION}")
