// xoshiro256** and splitmix64, transcribed from the reference C code at
// https://prng.di.unimi.it/ (public domain). See include/kiln/train/rng.h for the invariants.
#include <kiln/train/rng.h>

#include <kiln/base/check.h>

#include <cmath>
#include <numbers>

namespace kiln::train {
namespace {

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);  // 2^64 / golden ratio
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  // Mix the seed first so that (seed, stream) and (seed + 1, stream - 1) do not collide.
  uint64_t s = seed;
  uint64_t mixed = splitmix64(&s) + stream;
  return splitmix64(&mixed);
}

Rng::Rng(uint64_t seed) {
  uint64_t s = seed;
  for (uint64_t& word : state_.words)
    word = splitmix64(&s);
  // splitmix64 is a bijection of its counter, so four consecutive outputs are never all zero.
}

uint64_t Rng::next_u64() {
  std::array<uint64_t, 4>& s = state_.words;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Rng::next_double() {
  // The top 53 bits, the width of a double's significand, scaled by 2^-53.
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

uint64_t Rng::next_below(uint64_t bound) {
  KILN_CHECK(bound > 0) << "next_below(0) has no value to return";
  // Lemire, "Fast random integer generation in an interval" (2019): the high word of x * bound
  // is uniform once the low word avoids the first (2^64 mod bound) values.
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

float Rng::normal() {
  // u1 in (0, 1] so that log(u1) is finite.
  const double u1 = 1.0 - next_double();
  const double u2 = next_double();
  const double r = std::sqrt(-2.0 * std::log(u1));
  return static_cast<float>(r * std::cos(2.0 * std::numbers::pi * u2));
}

Status Rng::restore(const RngState& state) {
  if (state.words[0] == 0 && state.words[1] == 0 && state.words[2] == 0 && state.words[3] == 0) {
    return Status::invalid_argument("random generator state is all zero, which no seed produces");
  }
  state_ = state;
  return Status();
}

}  // namespace kiln::train
