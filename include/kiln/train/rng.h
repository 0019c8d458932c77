// Kiln's own pseudo-random number generator: xoshiro256** (Blackman and Vigna, 2018) seeded
// through splitmix64. Used wherever training must be reproducible: the data loader's shuffle,
// the model's initial weights, the sampler.
//
// Invariants:
// - The sequence depends only on the seed (or on a restored state): the same on every machine,
//   compiler and standard library, because it uses no <random> distribution (their algorithms
//   are implementation-defined). next_u64(), next_double() and next_below() are pure integer and
//   IEEE arithmetic; normal() also calls std::log, std::sqrt and std::cos in double and rounds to
//   float, which agrees wherever libm is faithful to about 1 ulp of double.
// - The whole state is four 64-bit words (RngState); it is never all zero (xoshiro's one fixed
//   point), so state() can be stored in a checkpoint and restore() continues the sequence.
// Not thread-safe; one generator per thread or stream.
#ifndef KILN_TRAIN_RNG_H_
#define KILN_TRAIN_RNG_H_

#include <array>
#include <cstdint>

#include <kiln/base/status.h>

namespace kiln::train {

// One step of splitmix64 (Vigna): advances `*state` by the golden-ratio increment and returns a
// well-mixed 64-bit value. Seeds xoshiro256** (its authors' recommendation) and derives seeds.
uint64_t splitmix64(uint64_t* state);

// A seed for stream `stream` of `seed` (e.g. the data order of epoch 7 under seed 1337): distinct
// (seed, stream) pairs give unrelated generators.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

struct RngState {
  std::array<uint64_t, 4> words{};
};

class Rng {
 public:
  // The state is four splitmix64 outputs of `seed`; every seed, 0 included, is valid.
  explicit Rng(uint64_t seed);

  // Uniform over all 2^64 values.
  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits (a multiple of 2^-53).
  double next_double();
  // Uniform in [0, bound), without modulo bias (Lemire's multiply-and-reject).
  // REQUIRES: bound > 0.
  uint64_t next_below(uint64_t bound);
  // Standard normal N(0, 1) by Box-Muller; uses two next_double() draws per call (the second
  // Box-Muller value is dropped, so the state stays four words).
  float normal();

  RngState state() const { return state_; }
  // Continues the sequence from `state`. Returns InvalidArgument for the all-zero state, which
  // no generator can reach (a corrupt or uninitialised record).
  Status restore(const RngState& state);

 private:
  RngState state_;
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_RNG_H_
