# Matmul (OpenBLAS GEMMs split over Kiln's pool) and fused attention. Included by
# src/ops/CMakeLists.txt.
list(APPEND KILN_OPS_SOURCES matmul.cc attention.cc)
kiln_ops_kernels(matmul)
kiln_ops_kernels(attention)
list(APPEND KILN_OPS_TESTS matmul_test.cc matmul_bf16_test.cc attention_test.cc)
