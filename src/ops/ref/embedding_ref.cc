// Reference token + position embedding (see include/kiln/ops/embedding.h).
//
// The backward sums every (b, t) row that names a token in double before adding it to that
// token's row of dwte once, so repeated tokens (the common case) are exact to one rounding.
#include <string>
#include <vector>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {
namespace {

// kInvalidArgument naming the first token id outside [0, V), so a bad id cannot index out of
// bounds.
Status check_tokens(const char* op, const TensorView& tokens, int64_t V) {
  const int32_t* ids = tokens.i32_ptr();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      return Status::invalid_argument(std::string(op) + ": token " + std::to_string(ids[i]) +
                                      " at position " + std::to_string(i) + " is outside [0, " +
                                      std::to_string(V) + ")");
    }
  }
  return Status();
}

}  // namespace

Status embedding_forward(const EmbeddingParams& p) {
  const int64_t B = p.tokens.size(0);
  const int64_t T = p.tokens.size(1);
  const int64_t C = p.wte.size(1);
  KILN_RETURN_IF_ERROR(check_tokens("ref::embedding_forward", p.tokens, p.wte.size(0)));
  const int32_t* tokens = p.tokens.i32_ptr();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t token = tokens[b * T + t];
      for (int64_t c = 0; c < C; ++c) {
        at(p.y, b, t, c) =
            static_cast<float>(static_cast<double>(at(p.wte, token, c)) + at(p.wpe, t, c));
      }
    }
  }
  return Status();
}

Status embedding_backward(const EmbeddingBackwardParams& p) {
  const int64_t B = p.tokens.size(0);
  const int64_t T = p.tokens.size(1);
  const int64_t V = p.dwte.size(0);
  const int64_t C = p.dwte.size(1);
  KILN_RETURN_IF_ERROR(check_tokens("ref::embedding_backward", p.tokens, V));
  const int32_t* tokens = p.tokens.i32_ptr();
  std::vector<double> dwte(static_cast<size_t>(V * C), 0.0);
  std::vector<double> dwpe(static_cast<size_t>(T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t token = tokens[b * T + t];
      for (int64_t c = 0; c < C; ++c) {
        dwte[static_cast<size_t>(token * C + c)] += at(p.dy, b, t, c);
        dwpe[static_cast<size_t>(t * C + c)] += at(p.dy, b, t, c);
      }
    }
  }
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t c = 0; c < C; ++c)
      at(p.dwte, v, c) =
          static_cast<float>(at(p.dwte, v, c) + dwte[static_cast<size_t>(v * C + c)]);
  }
  // Rows of wpe at or beyond T received nothing and stay as they were.
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c)
      at(p.dwpe, t, c) =
          static_cast<float>(at(p.dwpe, t, c) + dwpe[static_cast<size_t>(t * C + c)]);
  }
  return Status();
}

}  // namespace kiln::ops::ref
