// Token + position embedding (GPT-2):  y[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
// Backward: dwte[tokens[b, t], :] += dy[b, t, :],  dwpe[t, :] += dy[b, t, :]  (accumulated).
//
// tokens (B, T) i32 in [0, V); wte (V, C); wpe (T_max >= T, C); y and dy (B, T, C); all f32
// contiguous. A token id outside [0, V) is kInvalidArgument naming its position and value.
#ifndef KILN_OPS_EMBEDDING_H_
#define KILN_OPS_EMBEDDING_H_

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

struct EmbeddingParams {
  TensorView tokens;  // (B, T) i32
  TensorView wte;     // (V, C)
  TensorView wpe;     // (T_max, C)
  TensorView y;       // (B, T, C) out
};
Status embedding_forward(const EmbeddingParams& p, const Context& ctx);

struct EmbeddingBackwardParams {
  TensorView tokens;  // (B, T) i32
  TensorView dy;      // (B, T, C)
  TensorView dwte;    // (V, C) accumulated
  TensorView dwpe;    // (T_max, C) accumulated
};
Status embedding_backward(const EmbeddingBackwardParams& p, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_EMBEDDING_H_
