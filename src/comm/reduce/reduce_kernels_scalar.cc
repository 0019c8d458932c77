// The scalar reduce kernel: plain x86-64 (SSE2), one element at a time. It is the specification
// (reduce_scalar_ops.h) run as is; the AVX2 and AVX-512 kernels must match it bit for bit.
//
// Compiled with -ffp-contract=off like the other kernel TUs, so no path fuses a multiply into an
// add the others do not (reduce.cmake).
#include "comm/reduce/reduce_kernels_internal.h"
#include "comm/reduce/reduce_scalar_ops.h"

namespace kiln::comm::reduce_internal {
namespace {

template <DataType D, Kind K>
struct ScalarKernel {
  static void run(const KernelArgs& args) { scalar_loop<D, K>(args, 0, args.count); }
};

}  // namespace

void reduce_kernel_scalar(const KernelArgs& args) {
  dispatch<ScalarKernel>(args);
}

}  // namespace kiln::comm::reduce_internal
