// Gpt2::init_weights: GPT-2's initialisation from Kiln's seeded PRNG (kiln/train/rng.h), so the
// same seed gives the same bits on every machine and build.
//
// Each parameter tensor draws from its own generator, Rng(derive_seed(seed, index in the
// ParamInfo list)): a tensor's values depend only on the seed and its place in the export order,
// not on how many values the tensors before it drew.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <kiln/train/rng.h>

#include "train/model_state.h"

namespace kiln::train {
namespace {

// GPT-2's std for embeddings and Linear weights.
constexpr double kInitStd = 0.02;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

void Gpt2::init_weights(uint64_t seed) {
  State& s = *s_;
  s.weight16_stale = true;
  // The residual projections are scaled down by 1/sqrt(2 L): each block adds two of them to the
  // residual stream, whose variance would otherwise grow with depth (GPT-2 paper, section 2.3).
  const double proj_std = kInitStd / std::sqrt(2.0 * s.config.n_layer);
  // Zero first: biases, wte's pad rows and the alignment gaps.
  std::memset(s.param_arena.get(), 0, s.param_floats * sizeof(float));
  for (size_t i = 0; i < s.params.size(); ++i) {
    const ParamInfo& p = s.params[i];
    float* data = s.param_arena.get() + p.offset;
    if (ends_with(p.name, "ln_1.weight") || ends_with(p.name, "ln_2.weight") ||
        p.name == "ln_f.weight") {
      for (size_t j = 0; j < p.numel; ++j)
        data[j] = 1.0f;
    } else if (p.decay) {  // the 2-D weights: embeddings and Linear weights
      const bool residual_proj =
          ends_with(p.name, "attn.proj.weight") || ends_with(p.name, "mlp.proj.weight");
      const double std = residual_proj ? proj_std : kInitStd;
      Rng rng(derive_seed(seed, i));
      for (size_t j = 0; j < p.numel; ++j)
        data[j] = static_cast<float>(std * rng.normal());
    }
  }
}

}  // namespace kiln::train
