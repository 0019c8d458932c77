// Reference softmax cross-entropy (see include/kiln/ops/cross_entropy.h), row by row in double.
//
//   lse_n = log sum_{v < vocab} exp(l_nv)            (with the row maximum subtracted first)
//   loss_n = lse_n - l_n,target
//   dl_nv = (exp(l_nv - lse_n) - [v == target]) * dloss_n  for v < vocab, 0 in the padding
//
// The backward recomputes lse in double from the logits instead of reading the forward's f32
// copy, and overwrites the logits in place as documented: each element is read before written.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {
namespace {

int64_t vocab_of(int64_t vocab, const TensorView& logits) {
  return vocab == 0 ? logits.size(1) : vocab;
}

// The target of row n, or kInvalidArgument when it is outside [0, V) (it would index past the
// row).
Result<int64_t> target_of(const char* op, const TensorView& targets, int64_t n, int64_t V) {
  const int32_t target = targets.i32_ptr()[n * targets.stride[0]];
  if (target < 0 || target >= V) {
    return Status::invalid_argument(std::string(op) + ": target " + std::to_string(target) +
                                    " of row " + std::to_string(n) + " is outside [0, " +
                                    std::to_string(V) + ")");
  }
  return static_cast<int64_t>(target);
}

double log_sum_exp(const TensorView& logits, int64_t n, int64_t V) {
  double max_logit = -INFINITY;
  for (int64_t v = 0; v < V; ++v)
    max_logit = std::max(max_logit, static_cast<double>(at(logits, n, v)));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v)
    sum += std::exp(at(logits, n, v) - max_logit);
  return max_logit + std::log(sum);
}

}  // namespace

Status cross_entropy_forward(const CrossEntropyParams& p) {
  const int64_t N = p.logits.size(0);
  const int64_t V = vocab_of(p.vocab, p.logits);
  for (int64_t n = 0; n < N; ++n) {
    KILN_ASSIGN_OR_RETURN(const int64_t target,
                          target_of("ref::cross_entropy_forward", p.targets, n, V));
    const double lse = log_sum_exp(p.logits, n, V);
    at(p.lse, n) = static_cast<float>(lse);
    at(p.losses, n) = static_cast<float>(lse - at(p.logits, n, target));
  }
  return Status();
}

Status cross_entropy_backward(const CrossEntropyBackwardParams& p) {
  if (p.dlogits.present()) {  // ref.h: the references' outputs are f32
    return Status::invalid_argument(
        "ref::cross_entropy_backward: a bf16 dlogits is the kernel's f32 gradient rounded; "
        "the reference writes the f32 gradient over the logits only");
  }
  const int64_t N = p.logits.size(0);
  const int64_t Vp = p.logits.size(1);
  const int64_t V = vocab_of(p.vocab, p.logits);
  for (int64_t n = 0; n < N; ++n) {
    KILN_ASSIGN_OR_RETURN(const int64_t target,
                          target_of("ref::cross_entropy_backward", p.targets, n, V));
    const double lse = log_sum_exp(p.logits, n, V);
    const double dloss = at(p.dlosses, n);
    for (int64_t v = 0; v < V; ++v) {
      const double prob = std::exp(at(p.logits, n, v) - lse);
      at(p.logits, n, v) = static_cast<float>((prob - (v == target ? 1.0 : 0.0)) * dloss);
    }
    for (int64_t v = V; v < Vp; ++v)
      at(p.logits, n, v) = 0.0f;
  }
  return Status();
}

}  // namespace kiln::ops::ref
