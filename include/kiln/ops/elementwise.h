// Element-wise ops of a transformer block.
//
// GELU, tanh approximation (GPT-2's):
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   dx (=|+=) dy * dy/dx
// Residual add:  y = a + b;   backward: da += dy, db += dy.
//
// All views contiguous, of equal numel (any shape), f32 except GELU's output (below). y may
// alias a or b (in place).
#ifndef KILN_OPS_ELEMENTWISE_H_
#define KILN_OPS_ELEMENTWISE_H_

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

// GELU's output (y, or dx) may be bf16 instead of f32: each value is the f32 result rounded to
// nearest even, as convert_f32_to_bf16 would round it (a bf16 matmul's input, written without
// an f32 pass in between). A bf16 output aliases no input and is never accumulated into.
struct GeluParams {
  TensorView x;
  TensorView y;  // out, f32 or bf16; an f32 y may alias x
};
Status gelu_forward(const GeluParams& p, const Context& ctx);

struct GeluBackwardParams {
  TensorView x;  // the forward's input
  TensorView dy;
  TensorView dx;               // out, f32 or bf16; an f32 dx may alias dy
  bool accumulate_dx = false;  // f32 dx only
};
Status gelu_backward(const GeluBackwardParams& p, const Context& ctx);

struct ResidualParams {
  TensorView a;
  TensorView b;
  TensorView y;  // out; may alias a or b
};
Status residual_forward(const ResidualParams& p, const Context& ctx);

struct ResidualBackwardParams {
  TensorView dy;
  TensorView da;  // accumulated
  TensorView db;  // accumulated
};
Status residual_backward(const ResidualBackwardParams& p, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_ELEMENTWISE_H_
