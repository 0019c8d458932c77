// Reference bf16 <-> f32 conversion (see include/kiln/ops/convert.h).
//
// bf16 is the top 16 bits of an f32. To round an f32 x to bf16 the reference does not use the
// kernels' add-and-shift bit trick; it takes the two bf16 values that bracket |x| (lo, the
// truncation of |x|, and hi, the next bf16 up), measures both distances in double (exact: every
// value involved has at most 24 significant bits) and keeps the nearer, the one with an even last
// bit on a tie. hi = lo + one bf16 ulp, so when lo is the largest finite bf16 hi's bit pattern is
// infinity: an x at least half an ulp above it overflows to infinity, as IEEE rounding requires.
// NaN becomes a quiet NaN with the same sign; infinities and zeros keep their sign.
#include <bit>
#include <cmath>
#include <cstdint>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {
namespace {

constexpr uint32_t kSignBit = 0x8000'0000u;
constexpr uint32_t kExponentMask = 0x7F80'0000u;
constexpr uint32_t kLowHalf = 0x0000'FFFFu;  // the bits bf16 drops
constexpr uint32_t kBf16Ulp = 0x0001'0000u;  // one step of bf16's last mantissa bit
constexpr uint16_t kBf16QuietNan = 0x7FC0u;  // exponent all ones, top mantissa bit set
constexpr int kF32MantissaBits = 23;
constexpr int kBf16MantissaBits = 7;
constexpr int kF32ExponentBias = 127;
// Spacing of bf16 values in the subnormal range: 2^(1 - 127 - 7).
constexpr int kBf16SubnormalUlpExponent = 1 - kF32ExponentBias - kBf16MantissaBits;

uint16_t round_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits & kSignBit) >> 16);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | kBf16QuietNan);
  if (std::isinf(x)) return static_cast<uint16_t>(bits >> 16);
  const uint32_t magnitude = bits & ~kSignBit;
  const uint32_t lo = magnitude & ~kLowHalf;
  const int exponent_field = static_cast<int>((lo & kExponentMask) >> kF32MantissaBits);
  const int ulp_exponent = exponent_field == 0
                               ? kBf16SubnormalUlpExponent
                               : exponent_field - kF32ExponentBias - kBf16MantissaBits;
  const double lo_value = std::bit_cast<float>(lo);
  const double hi_value = lo_value + std::ldexp(1.0, ulp_exponent);
  const double value = std::fabs(static_cast<double>(x));
  const double below = value - lo_value;
  const double above = hi_value - value;
  const bool lo_is_even = (lo & kBf16Ulp) == 0;
  const bool take_hi = above < below || (above == below && !lo_is_even);
  const uint32_t rounded = take_hi ? lo + kBf16Ulp : lo;
  return static_cast<uint16_t>(sign | (rounded >> 16));
}

}  // namespace

Status convert_f32_to_bf16(const TensorView& src, const TensorView& dst) {
  const float* in = src.f32_ptr();
  uint16_t* out = dst.bf16_ptr();
  for (int64_t i = 0; i < src.numel(); ++i)
    out[i] = round_to_bf16(in[i]);
  return Status();
}

Status convert_bf16_to_f32(const TensorView& src, const TensorView& dst) {
  const uint16_t* in = src.bf16_ptr();
  float* out = dst.f32_ptr();
  for (int64_t i = 0; i < src.numel(); ++i)
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
  return Status();
}

}  // namespace kiln::ops::ref
