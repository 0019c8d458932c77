// Fused softmax + cross-entropy over the vocabulary, without materialising the probabilities.
//
//   forward:  lse[n] = log(sum_v exp(logits[n, v]))  over v < vocab
//             losses[n] = lse[n] - logits[n, targets[n]]
//   backward: logits[n, v] := (softmax(logits[n])[v] - [v == targets[n]]) * dlosses[n]
//             in place, for v < vocab; columns from vocab to the row's end (padding) := 0;
//             or, when the optional bf16 dlogits is given, the same values rounded into it and
//             the logits left as they are
//
// logits (N, Vp) f32 with Vp >= vocab (a padded vocabulary, as llm.c pads 50257 to 50304), rows
// may be strided; targets (N) i32 in [0, vocab); losses, lse, dlosses (N) f32. A mean loss over
// N rows has dlosses[n] = 1/N. A target outside [0, vocab) is kInvalidArgument naming the row.
#ifndef KILN_OPS_CROSS_ENTROPY_H_
#define KILN_OPS_CROSS_ENTROPY_H_

#include <cstdint>

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

struct CrossEntropyParams {
  TensorView logits;   // (N, Vp)
  TensorView targets;  // (N) i32
  TensorView losses;   // (N) out
  TensorView lse;      // (N) out, for the backward
  int64_t vocab = 0;   // 0 means Vp
};
Status cross_entropy_forward(const CrossEntropyParams& p, const Context& ctx);

struct CrossEntropyBackwardParams {
  TensorView logits;   // (N, Vp) in: logits; out: dlogits (unless dlogits is given)
  TensorView targets;  // (N) i32
  TensorView lse;      // (N), from the forward
  TensorView dlosses;  // (N)
  int64_t vocab = 0;
  // Optional (N, Vp) bf16, unit inner stride, not overlapping logits: when given, dlogits go
  // here, each the f32 gradient rounded as convert_f32_to_bf16 rounds it (a bf16 head's
  // input), and logits are left as they are.
  TensorView dlogits = TensorView();
};
Status cross_entropy_backward(const CrossEntropyBackwardParams& p, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_CROSS_ENTROPY_H_
