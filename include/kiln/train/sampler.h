// Text generation with a trained Gpt2: top-k sampling with a temperature, from Kiln's seeded Rng.
//
// For each new token the model runs a forward over the context's last block_size tokens (batch
// 1; recomputing the whole window each token is simple and cheap at the sizes this CPU trainer
// runs), takes the logits at the last position and draws from them:
//   keep the top_k largest logits of the real vocabulary (all of them when top_k is 0 or at least
//   the vocabulary; ties go to the lower id), p_i ~ exp((l_i - l_max) / temperature), draw
//   u = rng.next_double() and take the first id whose cumulative probability exceeds u * sum.
// temperature 0 is greedy (the largest logit). The same weights, context, options and seed give
// the same tokens.
#ifndef KILN_TRAIN_SAMPLER_H_
#define KILN_TRAIN_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/train/model.h>
#include <kiln/train/rng.h>

namespace kiln::train {

struct SampleOptions {
  int tokens = 256;          // how many to generate
  int top_k = 40;            // 0: the whole vocabulary
  float temperature = 1.0f;  // >= 0; 0 is greedy
  uint64_t seed = 1337;
};

// Picks tokens from logits. Holds its scratch, sized once for the vocabulary.
class TokenSampler {
 public:
  // REQUIRES: vocab_size >= 1, top_k >= 0, temperature >= 0.
  TokenSampler(int vocab_size, int top_k, float temperature, uint64_t seed);

  // The next token from `logits` (at least vocab_size entries; entries past it, the padded
  // vocabulary's, are ignored).
  uint32_t next(std::span<const float> logits);

 private:
  int vocab_size_;
  int top_k_;
  float temperature_;
  Rng rng_;
  std::vector<uint32_t> ids_;  // (vocab_size) scratch for the top-k selection
};

// The model config stored in a weights file's __metadata__ (format "kiln-gpt2"). Errors name the
// file and the field: kInvalidArgument for a missing or malformed field or another format, the
// safetensors reader's errors otherwise.
Result<ModelConfig> read_weights_config(const std::string& path);

// Generates options.tokens tokens after `context` (the prompt's ids; at least one, REQUIRES),
// calling on_token(id) for each as soon as it is drawn. `model` must have been created with
// batch * seq >= min(block_size, context.size() + options.tokens).
Status generate(Gpt2* model, std::span<const uint32_t> context, const SampleOptions& options,
                const ops::Context& ctx, const std::function<void(uint32_t)>& on_token);

}  // namespace kiln::train

#endif  // KILN_TRAIN_SAMPLER_H_
