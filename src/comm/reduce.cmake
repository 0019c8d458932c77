# Element-wise reduction kernels of kiln_comm (dtype x op, SIMD with run-time dispatch), their
# tests and their micro-benchmark. Included by src/comm/CMakeLists.txt before kiln_comm exists.
#
# Each kernel TU gets its own ISA flags; the dispatcher (reduce_kernels.cc) gets none, so the
# library runs on any x86-64 and only calls a kernel after checking the CPU. -ffp-contract=off on
# every kernel TU keeps the compiler from fusing a multiply into an add on one path and not on
# another (results must be bit-identical across paths).
list(APPEND KILN_COMM_SOURCES
  reduce/reduce_kernels.cc
  reduce/reduce_kernels_scalar.cc
  reduce/reduce_kernels_avx2.cc
  reduce/reduce_kernels_avx512.cc)
list(APPEND KILN_COMM_TESTS
  reduce/reduce_kernels_test.cc)

# The scalar kernel is plain element-at-a-time C++; -O3 lets GCC vectorize it with SSE2, which is
# part of x86-64 (kiln_reduce_bench, f32 sum, 64 KiB: 16 GB/s at -O2, about 90-115 GB/s at -O3).
# Same results: the compiler keeps IEEE semantics per element, and the tests compare this path
# with an independent reference. It also makes this one file optimized in Debug builds.
set_source_files_properties(reduce/reduce_kernels_scalar.cc PROPERTIES
  COMPILE_OPTIONS "-O3;-ffp-contract=off")
set_source_files_properties(reduce/reduce_kernels_avx2.cc PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mfma;-ffp-contract=off")
set_source_files_properties(reduce/reduce_kernels_avx512.cc PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mfma;-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-ffp-contract=off")

# kiln_reduce_bench: reduce() per ISA against a plain auto-vectorized loop. The peer loops must be
# compiled at -O3 (GCC vectorizes at -O2 only with its cheapest cost model), hence the flag. The
# target may name kiln_comm before it exists: link items are resolved at generate time.
add_executable(kiln_reduce_bench ${PROJECT_SOURCE_DIR}/bench/comm/reduce_bench.cc)
target_include_directories(kiln_reduce_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(kiln_reduce_bench PRIVATE ${KILN_WARNINGS} -O3)
target_link_libraries(kiln_reduce_bench PRIVATE kiln_comm)
