// ops-check cases of embedding, cross-entropy, AdamW, the gradient norm and bf16 conversion
// (see ops_check.h).
//
// Embedding: a single token, and batches over small vocabularies (many repeated tokens, which
// the backward must sum) with T < T_max. Parameter gradients start from random values.
// Cross-entropy: an unpadded row, strided rows with a padded vocabulary, and GPT-2's 50257
// padded to 50304. The padding columns hold NaN: the forward must not read them and the
// backward must overwrite them with 0. dlosses in [0.5, 1.5].
// AdamW: step 1 from zero moments, later steps with weight decay and a clipping scale.
// Conversion: random bit patterns (every exponent, NaNs and infinities included) plus the
// rounding ties and overflow edges, and every bf16 value.
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/check/check_case.h"
#include "ops/ref/ref.h"

namespace kiln::ops::check {
namespace {

struct EmbeddingShape {
  int64_t B, T, V, C, T_max;
};

std::string describe(const EmbeddingShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " V=" + std::to_string(s.V) +
         " C=" + std::to_string(s.C) + " T_max=" + std::to_string(s.T_max);
}

Case embedding_forward_case(const OpTable& ops, const EmbeddingShape& s, uint64_t seed) {
  Case c;
  c.op = "embedding_forward";
  c.shape = describe(s);
  Rng rng(seed);
  const int tokens = c.buffers.add_i32("tokens", rng.ids(s.B * s.T, static_cast<int32_t>(s.V)));
  const int wte = c.buffers.add_f32("wte", rng.uniform(s.V * s.C, -1, 1));
  const int wpe = c.buffers.add_f32("wpe", rng.uniform(s.T_max * s.C, -1, 1));
  const int y = c.buffers.add_f32("y", nans(s.B * s.T * s.C));
  auto params = [=](Buffers& b) {
    return EmbeddingParams{b.view(tokens, {s.B, s.T}), b.view(wte, {s.V, s.C}),
                           b.view(wpe, {s.T_max, s.C}), b.view(y, {s.B, s.T, s.C})};
  };
  bind(c, params, &ref::embedding_forward, ops.embedding_forward);
  return c;
}

Case embedding_backward_case(const OpTable& ops, const EmbeddingShape& s, uint64_t seed) {
  Case c;
  c.op = "embedding_backward";
  c.shape = describe(s);
  Rng rng(seed);
  const int tokens = c.buffers.add_i32("tokens", rng.ids(s.B * s.T, static_cast<int32_t>(s.V)));
  const int dy = c.buffers.add_f32("dy", rng.uniform(s.B * s.T * s.C, -1, 1));
  const int dwte = c.buffers.add_f32("dwte", rng.uniform(s.V * s.C, -1, 1));
  const int dwpe = c.buffers.add_f32("dwpe", rng.uniform(s.T_max * s.C, -1, 1));
  auto params = [=](Buffers& b) {
    return EmbeddingBackwardParams{b.view(tokens, {s.B, s.T}), b.view(dy, {s.B, s.T, s.C}),
                                   b.view(dwte, {s.V, s.C}), b.view(dwpe, {s.T_max, s.C})};
  };
  bind(c, params, &ref::embedding_backward, ops.embedding_backward);
  return c;
}

struct CrossEntropyShape {
  int64_t N, Vp, vocab, row_stride;  // vocab 0 means Vp
};

std::string describe(const CrossEntropyShape& s) {
  std::string out = "N=" + std::to_string(s.N) + " Vp=" + std::to_string(s.Vp);
  if (s.vocab != 0) out += " vocab=" + std::to_string(s.vocab);
  if (s.row_stride != s.Vp) out += " row_stride=" + std::to_string(s.row_stride);
  return out;
}

int64_t vocab_of(const CrossEntropyShape& s) {
  return s.vocab == 0 ? s.Vp : s.vocab;
}

// Logits in [-4, 4] over the vocabulary, NaN in the padding and the gaps between rows.
std::vector<float> logits_of(Rng& rng, const CrossEntropyShape& s) {
  std::vector<float> logits = rng.uniform_rows(s.N, s.Vp, s.row_stride, -4, 4);
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t v = vocab_of(s); v < s.Vp; ++v)
      logits[static_cast<size_t>(n * s.row_stride + v)] = std::numeric_limits<float>::quiet_NaN();
  }
  return logits;
}

TensorView logits_view(Buffers& b, int id, const CrossEntropyShape& s) {
  return b.strided(id, 0, {s.N, s.Vp}, {s.row_stride, 1});
}

Case cross_entropy_forward_case(const OpTable& ops, const CrossEntropyShape& s, uint64_t seed) {
  Case c;
  c.op = "cross_entropy_forward";
  c.shape = describe(s);
  Rng rng(seed);
  const int logits = c.buffers.add_f32("logits", logits_of(rng, s));
  const int targets = c.buffers.add_i32("targets", rng.ids(s.N, static_cast<int32_t>(vocab_of(s))));
  const int losses = c.buffers.add_f32("losses", nans(s.N));
  const int lse = c.buffers.add_f32("lse", nans(s.N));
  auto params = [=](Buffers& b) {
    return CrossEntropyParams{logits_view(b, logits, s), b.view(targets, {s.N}),
                              b.view(losses, {s.N}), b.view(lse, {s.N}), s.vocab};
  };
  bind(c, params, &ref::cross_entropy_forward, ops.cross_entropy_forward);
  return c;
}

Case cross_entropy_backward_case(const OpTable& ops, const CrossEntropyShape& s, uint64_t seed) {
  Case c;
  c.op = "cross_entropy_backward";
  c.shape = describe(s);
  Rng rng(seed);
  const int logits = c.buffers.add_f32("logits", logits_of(rng, s));
  const int targets = c.buffers.add_i32("targets", rng.ids(s.N, static_cast<int32_t>(vocab_of(s))));
  const int lse = c.buffers.add_f32("lse", nans(s.N));
  const int dlosses = c.buffers.add_f32("dlosses", rng.uniform(s.N, 0.5f, 1.5f));
  std::vector<float> losses_scratch = nans(s.N);
  KILN_CHECK(
      ref::cross_entropy_forward({logits_view(c.buffers, logits, s), c.buffers.view(targets, {s.N}),
                                  TensorView::f32(losses_scratch.data(), {s.N}),
                                  c.buffers.view(lse, {s.N}), s.vocab})
          .ok());
  auto params = [=](Buffers& b) {
    return CrossEntropyBackwardParams{logits_view(b, logits, s), b.view(targets, {s.N}),
                                      b.view(lse, {s.N}), b.view(dlosses, {s.N}), s.vocab};
  };
  bind(c, params, &ref::cross_entropy_backward, ops.cross_entropy_backward);
  return c;
}

struct AdamWShape {
  int64_t n;
  int64_t step;
  float weight_decay;
  float grad_scale;
};

Case adamw_case(const OpTable& ops, const AdamWShape& s, uint64_t seed) {
  Case c;
  c.op = "adamw_update";
  c.shape = "n=" + std::to_string(s.n) + " step=" + std::to_string(s.step) +
            (s.weight_decay != 0.0f ? " weight_decay" : "") +
            (s.grad_scale != 1.0f ? " grad_scale" : "");
  Rng rng(seed);
  const bool first = s.step == 1;
  const int params_id = c.buffers.add_f32("params", rng.uniform(s.n, -1, 1));
  const int grads = c.buffers.add_f32("grads", rng.uniform(s.n, -1, 1));
  // Moments of earlier steps: m of the order of the gradients, v of their squares (>= 0).
  const int m = c.buffers.add_f32("m", first ? std::vector<float>(static_cast<size_t>(s.n), 0.0f)
                                             : rng.uniform(s.n, -0.5, 0.5));
  const int v = c.buffers.add_f32(
      "v", first ? std::vector<float>(static_cast<size_t>(s.n), 0.0f) : rng.uniform(s.n, 0, 0.3f));
  auto params = [=](Buffers& b) {
    AdamWParams p{b.view(params_id, {s.n}), b.view(grads, {s.n}), b.view(m, {s.n}),
                  b.view(v, {s.n})};
    p.lr = 1e-2f;  // larger than training's, so an error in the update is not lost in params
    p.weight_decay = s.weight_decay;
    p.step = s.step;
    p.grad_scale = s.grad_scale;
    return p;
  };
  bind(c, params, &ref::adamw_update, ops.adamw_update);
  return c;
}

Case global_grad_norm_case(const OpTable& ops, const std::vector<int64_t>& sizes, uint64_t seed) {
  Case c;
  c.op = "global_grad_norm";
  c.shape = "sizes=";
  Rng rng(seed);
  std::vector<int> ids;
  for (int64_t n : sizes) {
    c.shape += (ids.empty() ? "" : ",") + std::to_string(n);
    ids.push_back(c.buffers.add_f32("grads" + std::to_string(ids.size()), rng.uniform(n, -1, 1)));
  }
  const int norm = c.buffers.add_f64("norm", 1);
  auto views = [ids, sizes](Buffers& b) {
    std::vector<TensorView> out;
    for (size_t i = 0; i < ids.size(); ++i)
      out.push_back(b.view(ids[i], {sizes[i]}));
    return out;
  };
  c.run_ref = [views, norm](Buffers& b) -> Status {
    KILN_ASSIGN_OR_RETURN(*b.f64(norm), ref::global_grad_norm(views(b)));
    return Status();
  };
  if (ops.global_grad_norm != nullptr) {
    c.run_op = [views, norm, op = ops.global_grad_norm](Buffers& b, const Context& ctx) -> Status {
      KILN_ASSIGN_OR_RETURN(*b.f64(norm), op(views(b), ctx));
      return Status();
    };
  }
  return c;
}

// The values whose rounding to bf16 is easy to get wrong: ties (both ways), carries into the
// exponent, the overflow boundary, subnormals, signed zero, NaNs and infinities.
std::vector<uint32_t> bf16_edge_bits() {
  return {0x3F80'8000u, 0x3F81'8000u, 0x3F80'8001u, 0x3F80'7FFFu, 0x3FFF'FFFFu, 0x7F7F'FFFFu,
          0x7F7F'7FFFu, 0x7F7F'8000u, 0x0000'8000u, 0x0001'8000u, 0x0000'0001u, 0x8000'0000u,
          0x7F80'0000u, 0xFF80'0000u, 0x7FC0'0000u, 0x7F80'0001u, 0xFFFF'FFFFu, 0xBF80'8000u};
}

Case f32_to_bf16_case(const OpTable& ops, int64_t n, uint64_t seed) {
  Case c;
  c.op = "convert_f32_to_bf16";
  c.shape = "n=" + std::to_string(n);
  Rng rng(seed);
  std::vector<float> src(static_cast<size_t>(n));
  const std::vector<uint32_t> edges = bf16_edge_bits();
  for (size_t i = 0; i < src.size(); ++i) {
    const uint32_t bits = i < edges.size() ? edges[i] : static_cast<uint32_t>(rng.bits());
    src[i] = std::bit_cast<float>(bits);
  }
  const int in = c.buffers.add_f32("src", std::move(src));
  // Starts as a finite value no conversion here produces, so an element left unwritten shows.
  constexpr uint16_t kUnwritten = 0x1234;
  const int out =
      c.buffers.add_bf16("dst", std::vector<uint16_t>(static_cast<size_t>(n), kUnwritten));
  auto run = [in, out, n](Buffers& b, auto convert) {
    return convert(b.view(in, {n}), b.view(out, {n}));
  };
  c.run_ref = [run](Buffers& b) { return run(b, &ref::convert_f32_to_bf16); };
  if (ops.convert_f32_to_bf16 != nullptr) {
    c.run_op = [run, op = ops.convert_f32_to_bf16](Buffers& b, const Context& ctx) {
      return run(b, [&](const TensorView& s, const TensorView& d) { return op(s, d, ctx); });
    };
  }
  return c;
}

Case bf16_to_f32_case(const OpTable& ops, int64_t n, uint64_t seed) {
  Case c;
  c.op = "convert_bf16_to_f32";
  c.shape = "n=" + std::to_string(n);
  Rng rng(seed);
  // Every bf16 value in order, then random ones.
  constexpr int64_t kAllBf16 = 1 << 16;
  std::vector<uint16_t> src(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    src[static_cast<size_t>(i)] = static_cast<uint16_t>(i < kAllBf16 ? i : rng.bits());
  const int in = c.buffers.add_bf16("src", std::move(src));
  constexpr float kUnwritten = -7.0f;  // as above: finite, so an unwritten NaN shows
  const int out = c.buffers.add_f32("dst", std::vector<float>(static_cast<size_t>(n), kUnwritten));
  auto run = [in, out, n](Buffers& b, auto convert) {
    return convert(b.view(in, {n}), b.view(out, {n}));
  };
  c.run_ref = [run](Buffers& b) { return run(b, &ref::convert_bf16_to_f32); };
  if (ops.convert_bf16_to_f32 != nullptr) {
    c.run_op = [run, op = ops.convert_bf16_to_f32](Buffers& b, const Context& ctx) {
      return run(b, [&](const TensorView& s, const TensorView& d) { return op(s, d, ctx); });
    };
  }
  return c;
}

}  // namespace

std::vector<Case> embedding_cases(const OpTable& ops, uint64_t seed) {
  const EmbeddingShape shapes[] = {
      {1, 1, 5, 3, 1},
      {2, 67, 101, 129, 80},
      {3, 200, 50, 64, 256},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const EmbeddingShape& s : shapes) {
    cases.push_back(embedding_forward_case(ops, s, case_seed(seed, "embedding_forward", index)));
    cases.push_back(embedding_backward_case(ops, s, case_seed(seed, "embedding_backward", index)));
    ++index;
  }
  return cases;
}

std::vector<Case> cross_entropy_cases(const OpTable& ops, uint64_t seed) {
  const CrossEntropyShape shapes[] = {
      {1, 37, 0, 37},
      {67, 136, 129, 140},
      {5, 50304, 50257, 50304},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const CrossEntropyShape& s : shapes) {
    cases.push_back(
        cross_entropy_forward_case(ops, s, case_seed(seed, "cross_entropy_forward", index)));
    cases.push_back(
        cross_entropy_backward_case(ops, s, case_seed(seed, "cross_entropy_backward", index)));
    ++index;
  }
  return cases;
}

std::vector<Case> optimizer_cases(const OpTable& ops, uint64_t seed) {
  const AdamWShape shapes[] = {
      {1, 1, 0.0f, 1.0f},
      {1037, 7, 0.1f, 0.5f},
      {300007, 1000, 0.1f, 1.0f},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const AdamWShape& s : shapes) {
    cases.push_back(adamw_case(ops, s, case_seed(seed, "adamw_update", index)));
    ++index;
  }
  const std::vector<int64_t> norm_sizes[] = {{1}, {5, 3}, {1037, 5, 300007}};
  index = 0;
  for (const std::vector<int64_t>& sizes : norm_sizes) {
    cases.push_back(global_grad_norm_case(ops, sizes, case_seed(seed, "global_grad_norm", index)));
    ++index;
  }
  return cases;
}

std::vector<Case> convert_cases(const OpTable& ops, uint64_t seed) {
  std::vector<Case> cases;
  int index = 0;
  for (int64_t n : {int64_t{1037}, int64_t{300007}}) {
    cases.push_back(f32_to_bf16_case(ops, n, case_seed(seed, "convert_f32_to_bf16", index)));
    cases.push_back(bf16_to_f32_case(ops, n, case_seed(seed, "convert_bf16_to_f32", index)));
    ++index;
  }
  return cases;
}

}  // namespace kiln::ops::check
