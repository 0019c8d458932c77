# The double-precision references of every kiln_ops op (src/ops/ref/), ops-check, which runs
# every op on every ISA against them (src/ops/check/, inside kiln_ops so `kiln ops-check` can
# call it), and their tests: finite-difference checks of the references, ops-check per family
# and ISA, and the PyTorch parity test (which runs tests/ops/torch_reference.py with Debian's
# /usr/bin/python3 and python3-torch). Included by src/ops/CMakeLists.txt.
list(APPEND KILN_OPS_SOURCES
  check/linear_cases.cc
  check/norm_cases.cc
  check/ops_check.cc
  check/pointwise_cases.cc
  ref/attention_ref.cc
  ref/convert_ref.cc
  ref/cross_entropy_ref.cc
  ref/elementwise_ref.cc
  ref/embedding_ref.cc
  ref/matmul_ref.cc
  ref/norm_ref.cc
  ref/optimizer_ref.cc)
list(APPEND KILN_OPS_TESTS
  check/ops_check_test.cc
  ref/ref_grad_test.cc
  ref/ref_test.cc
  torch_parity_test.cc)
