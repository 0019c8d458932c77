// bf16 <-> f32 conversion (bf16 is storage only; kernels compute in f32).
//   to bf16: round to nearest, ties to even; NaN stays NaN (quiet); overflow rounds to infinity.
//   to f32:  exact.
// Views contiguous, equal numel.
#ifndef KILN_OPS_CONVERT_H_
#define KILN_OPS_CONVERT_H_

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

Status convert_f32_to_bf16(const TensorView& src, const TensorView& dst, const Context& ctx);
Status convert_bf16_to_f32(const TensorView& src, const TensorView& dst, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_CONVERT_H_
