# Point-wise and normalisation ops of kiln_ops (LayerNorm, RMSNorm, GELU, residual, embedding,
# softmax cross-entropy, AdamW, gradient norm, bf16 conversion): public functions, kernels, tests
# and the micro-benchmark. Included by src/ops/CMakeLists.txt before kiln_ops exists.
#
# Two kernel families, each compiled once per ISA: norm (cpu/norm.inc) and pointwise
# (cpu/pointwise.inc: everything else, which shares one set of loop and task helpers).
list(APPEND KILN_OPS_SOURCES
  convert.cc
  cross_entropy.cc
  elementwise.cc
  embedding.cc
  norm.cc
  optimizer.cc)
kiln_ops_kernels(norm)
kiln_ops_kernels(pointwise)
list(APPEND KILN_OPS_TESTS
  bf16_outputs_test.cc
  convert_test.cc
  cross_entropy_test.cc
  elementwise_test.cc
  embedding_test.cc
  norm_test.cc
  optimizer_test.cc)

# kiln_pointwise_bench: GB/s of each op on training shapes with 1 and 2 threads, beside a STREAM
# triad measured in the same run. -O3 so the triad loop is vectorized like STREAM's. The target
# may name kiln_ops before it exists: link items are resolved at generate time.
add_executable(kiln_pointwise_bench ${PROJECT_SOURCE_DIR}/bench/ops/pointwise_bench.cc)
target_include_directories(kiln_pointwise_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(kiln_pointwise_bench PRIVATE ${KILN_WARNINGS} -O3)
target_link_libraries(kiln_pointwise_bench PRIVATE kiln_ops)
