// Tests of the reduce kernels: every ISA the CPU has x every dtype x every op, on awkward counts,
// in place and out of place, with and without the fused copy, against a reference written here
// independently of the kernels (double-precision arithmetic with explicit rounding steps, and its
// own bf16 round-to-nearest-even that compares the two neighbouring bf16 values by distance).
//
// Every buffer sits between guard bytes, so a kernel that reads or writes past either end of a
// range (a bad mask or tail) fails; dst starts filled with a pattern, so an element not written
// fails too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <kiln/base/cpu.h>
#include <kiln/comm/types.h>

#include "comm/reduce/reduce_kernels.h"
#include "comm/reduce/reduce_kernels_internal.h"

namespace kiln::comm {
namespace {

constexpr CpuIsa kIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512};
constexpr DataType kDtypes[] = {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kI32,
                                DataType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
// Around every vector width (4, 8, 16 and 32 lanes, unrolled by 4) and its tails, plus primes.
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 31, 33, 1023, 4099, 100003};
// Bytes around each buffer that must stay untouched; one cache line.
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kDstFillByte = 0x5A;

CpuIsa best_isa() {
  return detect_cpu_features().best_isa();
}
bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(best_isa());
}
std::string skip_reason(CpuIsa isa) {
  return "this CPU lacks " + std::string(cpu_isa_name(isa)) +
         " (best: " + std::string(cpu_isa_name(best_isa())) + ")";
}

// memcmp that accepts the null pointers of empty vectors.
bool same_bytes(const void* x, const void* y, size_t bytes) {
  return bytes == 0 || std::memcmp(x, y, bytes) == 0;
}

template <typename T>
T get(const unsigned char* p, size_t index) {
  T v;
  std::memcpy(&v, p + index * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void put(unsigned char* p, size_t index, T v) {
  std::memcpy(p + index * sizeof(T), &v, sizeof(T));
}

// ---- The reference, independent of reduce_scalar_ops.h ----

// The value of a bf16 bit pattern, decoded field by field. With exponent field 255 and a zero
// mantissa it gives 2^128 (not infinity): the value the next step up from the largest finite bf16
// would have with an unbounded exponent, which is what IEEE overflow rounding compares against.
double bf16_value_unbounded(uint16_t h) {
  const int sign = (h >> 15) != 0 ? -1 : 1;
  const int exponent = (h >> 7) & 0xFF;
  const int mantissa = h & 0x7F;
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);  // subnormal: m * 2^-126 / 128
  return sign * std::ldexp(128 + mantissa, exponent - 127 - 7);
}

bool bf16_is_nan(uint16_t h) {
  return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
}

// Round-to-nearest-even of an fp32 value to bf16 by distance: of the two bf16 values around x
// (truncation, and one step away from zero), the nearer one; on a tie the one with an even
// mantissa. A NaN gives 0x7FC0 (callers only check that the result is a quiet NaN).
uint16_t ref_bf16_round(float x) {
  if (std::isnan(x)) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const auto toward_zero = static_cast<uint16_t>(u >> 16);
  if ((u & 0xFFFF) == 0) return toward_zero;  // exact (including infinities)
  const auto away = static_cast<uint16_t>(toward_zero + 1);
  const double d_toward = std::fabs(static_cast<double>(x) - bf16_value_unbounded(toward_zero));
  const double d_away = std::fabs(bf16_value_unbounded(away) - static_cast<double>(x));
  if (d_toward < d_away) return toward_zero;
  if (d_away < d_toward) return away;
  return (toward_zero & 1) == 0 ? toward_zero : away;
}

// A float result as float, from a double computed exactly or rounded once: for +, / of floats,
// rounding to double then to float equals rounding to float once (53 >= 2 * 24 + 2 bits).
float to_f32(double x) {
  return static_cast<float>(x);
}

// op(a, b) on real values given as doubles, for float types. `round` rounds to the type's
// precision; it is applied after the sum and again after the division, as the contract says.
template <typename Round>
double ref_float(double a, double b, ReduceOp op, int divide_by, Round round) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
    case ReduceOp::kSum: return round(a + b);
    case ReduceOp::kAvg: {
      const double sum = round(a + b);
      return divide_by > 1 ? round(sum / divide_by) : sum;
    }
  }
  return 0;
}

// Integer ops in a wider type, wrapped explicitly, divided with truncation toward zero.
template <typename T, typename Wide>
T ref_int(T a, T b, ReduceOp op, int divide_by) {
  switch (op) {
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      const Wide modulus = Wide{1} << (8 * sizeof(T));
      Wide sum = Wide{a} + Wide{b};
      if (sum > Wide{std::numeric_limits<T>::max()}) sum -= modulus;
      if (sum < Wide{std::numeric_limits<T>::min()}) sum += modulus;
      if (op == ReduceOp::kAvg && divide_by > 1) sum /= divide_by;  // C++ truncates toward zero
      return static_cast<T>(sum);
    }
  }
  return 0;
}

// Checks element `i` of `got` against the reference for a[i], b[i]. For floats: a NaN is expected
// iff an operand is NaN (any NaN; bf16 must be quiet), a zero result of min/max may have either
// sign, everything else must match bit for bit.
::testing::AssertionResult check_element(DataType dtype, ReduceOp op, int divide_by,
                                         const unsigned char* a, const unsigned char* b,
                                         const unsigned char* got, size_t i) {
  auto fail = [&](const std::string& want, const std::string& have) {
    return ::testing::AssertionFailure()
           << dtype_name(dtype) << " " << reduce_op_name(op) << " divide_by=" << divide_by
           << " element " << i << ": want " << want << ", got " << have;
  };
  const bool min_max = op == ReduceOp::kMin || op == ReduceOp::kMax;
  switch (dtype) {
    case DataType::kF32: {
      const float want = to_f32(ref_float(get<float>(a, i), get<float>(b, i), op, divide_by,
                                          [](double x) { return static_cast<double>(to_f32(x)); }));
      const float have = get<float>(got, i);
      if (std::isnan(want) != std::isnan(have))
        return fail(std::to_string(want), std::to_string(have));
      if (std::isnan(want) || (min_max && want == 0 && have == 0)) break;
      if (std::memcmp(&want, &have, sizeof(want)) != 0) {
        return fail(std::to_string(want), std::to_string(have));
      }
      break;
    }
    case DataType::kF64: {
      const double want = ref_float(get<double>(a, i), get<double>(b, i), op, divide_by,
                                    [](double x) { return x; });
      const double have = get<double>(got, i);
      if (std::isnan(want) != std::isnan(have))
        return fail(std::to_string(want), std::to_string(have));
      if (std::isnan(want) || (min_max && want == 0 && have == 0)) break;
      if (std::memcmp(&want, &have, sizeof(want)) != 0) {
        return fail(std::to_string(want), std::to_string(have));
      }
      break;
    }
    case DataType::kBF16: {
      const uint16_t ha = get<uint16_t>(a, i);
      const uint16_t hb = get<uint16_t>(b, i);
      const double va = bf16_is_nan(ha) ? std::nan("") : bf16_value_unbounded(ha);
      const double vb = bf16_is_nan(hb) ? std::nan("") : bf16_value_unbounded(hb);
      // Infinities decode as +-2^128 above; restore them.
      auto real = [](uint16_t h, double v) {
        return (h & 0x7FFF) == 0x7F80 ? std::copysign(INFINITY, v) : v;
      };
      const float f = to_f32(ref_float(real(ha, va), real(hb, vb), op, divide_by,
                                       [](double x) { return static_cast<double>(to_f32(x)); }));
      const uint16_t want = ref_bf16_round(f);
      const uint16_t have = get<uint16_t>(got, i);
      char text[2][16];
      std::snprintf(text[0], sizeof(text[0]), "0x%04x", want);
      std::snprintf(text[1], sizeof(text[1]), "0x%04x", have);
      if (bf16_is_nan(want)) {
        if (!bf16_is_nan(have) || (have & 0x0040) == 0) return fail("a quiet NaN", text[1]);
        break;
      }
      if (min_max && (want & 0x7FFF) == 0 && (have & 0x7FFF) == 0) break;
      if (want != have) return fail(text[0], text[1]);
      break;
    }
    case DataType::kI32: {
      const auto want =
          ref_int<int32_t, int64_t>(get<int32_t>(a, i), get<int32_t>(b, i), op, divide_by);
      const auto have = get<int32_t>(got, i);
      if (want != have) return fail(std::to_string(want), std::to_string(have));
      break;
    }
    case DataType::kI64: {
      const auto want =
          ref_int<int64_t, __int128>(get<int64_t>(a, i), get<int64_t>(b, i), op, divide_by);
      const auto have = get<int64_t>(got, i);
      if (want != have) return fail(std::to_string(want), std::to_string(have));
      break;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- Test data ----

// Random values of `dtype` with the awkward ones mixed in: signed zeros, infinities, NaNs,
// subnormals, values near the largest finite (sums overflow), and for integers the extremes
// (sums wrap). Deterministic in `seed`.
std::vector<unsigned char> random_values(DataType dtype, size_t count, uint64_t seed) {
  // SplitMix64: fast (the streaming test draws millions of values) and the same on every
  // platform, unlike std:: distributions.
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
  };
  auto pick = [&] { return static_cast<int>(next() % 100); };
  auto unit = [&] { return std::ldexp(static_cast<double>(next() >> 11), -52) - 1.0; };  // [-1, 1)
  auto scale = [&] { return static_cast<int>(next() % 61) - 30; };  // [-30, 30]
  std::vector<unsigned char> out(count * dtype_size(dtype));
  auto random_real = [&](double max_finite, double min_subnormal) {
    const int p = pick();
    if (p < 2) return 0.0;
    if (p < 4) return -0.0;
    if (p < 5) return std::numeric_limits<double>::infinity();
    if (p < 6) return -std::numeric_limits<double>::infinity();
    if (p < 8) return std::numeric_limits<double>::quiet_NaN();
    if (p < 11) return unit() * max_finite;
    if (p < 13) return std::floor(unit() * 8) * min_subnormal;
    if (p < 30) return std::floor(unit() * 100);  // small integers: exact sums and ties
    return std::ldexp(unit(), scale());
  };
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DataType::kF32:
        put<float>(out.data(), i,
                   static_cast<float>(random_real(std::numeric_limits<float>::max(),
                                                  std::numeric_limits<float>::denorm_min())));
        break;
      case DataType::kF64:
        put<double>(out.data(), i,
                    random_real(std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::denorm_min()));
        break;
      case DataType::kBF16: {
        // Truncate an fp32 to its top 16 bits: any bf16 pattern, specials included. The NaN
        // cases get a signalling NaN now and then (it must come out quiet).
        const float f = static_cast<float>(random_real(3.38e38, 9.2e-41));
        uint32_t u;
        std::memcpy(&u, &f, sizeof(u));
        auto h = static_cast<uint16_t>(u >> 16);
        if (std::isnan(f) && pick() < 50) h = static_cast<uint16_t>((h & 0x8000) | 0x7F81);
        put<uint16_t>(out.data(), i, h);
        break;
      }
      case DataType::kI32: {
        const int p = pick();
        const auto r = static_cast<uint32_t>(next());
        int32_t v = p < 5    ? std::numeric_limits<int32_t>::max()
                    : p < 10 ? std::numeric_limits<int32_t>::min()
                    : p < 40 ? static_cast<int32_t>(r)
                             : static_cast<int32_t>(r % 2001) - 1000;
        put<int32_t>(out.data(), i, v);
        break;
      }
      case DataType::kI64: {
        const int p = pick();
        const auto r = next();
        int64_t v = p < 5    ? std::numeric_limits<int64_t>::max()
                    : p < 10 ? std::numeric_limits<int64_t>::min()
                    : p < 40 ? static_cast<int64_t>(r)
                             : static_cast<int64_t>(r % 2001) - 1000;
        put<int64_t>(out.data(), i, v);
        break;
      }
    }
  }
  return out;
}

// A byte buffer with guard bytes on both sides and a data region starting `misalign_bytes` past a
// 64-byte boundary.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes, size_t misalign_bytes)
      : bytes_(bytes), storage_(bytes + 4 * kGuardBytes, kGuardByte) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data()) + kGuardBytes;
    const uintptr_t aligned = (base + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
    offset_ = aligned - reinterpret_cast<uintptr_t>(storage_.data()) + misalign_bytes;
  }
  unsigned char* data() { return storage_.data() + offset_; }
  size_t bytes() const { return bytes_; }
  // True iff no byte outside [data(), data() + bytes()) changed.
  bool guards_intact() const {
    for (size_t i = 0; i < offset_; ++i) {
      if (storage_[i] != kGuardByte) return false;
    }
    for (size_t i = offset_ + bytes_; i < storage_.size(); ++i) {
      if (storage_[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<unsigned char> storage_;
  size_t offset_ = 0;
};

enum class Alias { kNone, kDstIsA, kDstIsB };
const char* alias_name(Alias alias) {
  switch (alias) {
    case Alias::kNone: return "out-of-place";
    case Alias::kDstIsA: return "dst=a";
    case Alias::kDstIsB: return "dst=b";
  }
  return "?";
}

struct Case {
  CpuIsa isa = CpuIsa::kScalar;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  Alias alias = Alias::kNone;
  bool with_dst2 = false;
  int divide_by = 1;
  size_t misalign_bytes = 0;  // of every buffer, from a 64-byte boundary
};

std::string describe(const Case& c) {
  return std::string(cpu_isa_name(c.isa)) + " " + std::string(dtype_name(c.dtype)) + " " +
         std::string(reduce_op_name(c.op)) + " count=" + std::to_string(c.count) + " " +
         alias_name(c.alias) + (c.with_dst2 ? " dst2" : "") +
         " divide_by=" + std::to_string(c.divide_by) +
         " misalign=" + std::to_string(c.misalign_bytes);
}

// Runs one case and checks every element, dst2 == dst, untouched inputs and intact guards. Stops
// at the first wrong element so a broken kernel prints one line, not a hundred thousand.
void run_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  const size_t bytes = c.count * dtype_size(c.dtype);
  const uint64_t seed = c.count * 131 + static_cast<uint64_t>(c.dtype) * 7;
  const std::vector<unsigned char> a0 = random_values(c.dtype, c.count, seed);
  const std::vector<unsigned char> b0 = random_values(c.dtype, c.count, seed + 1);
  GuardedBuffer a(bytes, c.misalign_bytes), b(bytes, c.misalign_bytes);
  GuardedBuffer dst(bytes, c.misalign_bytes), dst2(bytes, c.misalign_bytes);
  if (bytes > 0) {
    std::memcpy(a.data(), a0.data(), bytes);
    std::memcpy(b.data(), b0.data(), bytes);
    std::memset(dst.data(), kDstFillByte, bytes);
    std::memset(dst2.data(), kDstFillByte, bytes);
  }
  ReduceArgs args;
  args.a = a.data();
  args.b = b.data();
  args.dst = c.alias == Alias::kDstIsA   ? a.data()
             : c.alias == Alias::kDstIsB ? b.data()
                                         : dst.data();
  args.dst2 = c.with_dst2 ? dst2.data() : nullptr;
  args.count = c.count;
  args.dtype = c.dtype;
  args.op = c.op;
  args.divide_by = c.divide_by;
  reduce_with_isa(args, c.isa);

  const auto* got = static_cast<const unsigned char*>(args.dst);
  for (size_t i = 0; i < c.count; ++i) {
    const auto ok = check_element(c.dtype, c.op, c.divide_by, a0.data(), b0.data(), got, i);
    ASSERT_TRUE(ok);
  }
  if (c.with_dst2) {
    ASSERT_TRUE(same_bytes(dst2.data(), got, bytes)) << "dst2 differs from dst";
  } else {
    const std::vector<unsigned char> untouched(bytes, kDstFillByte);
    ASSERT_TRUE(same_bytes(dst2.data(), untouched.data(), bytes)) << "dst2 written though null";
  }
  if (c.alias != Alias::kDstIsA) {
    ASSERT_TRUE(same_bytes(a.data(), a0.data(), bytes)) << "a changed";
  }
  if (c.alias != Alias::kDstIsB) {
    ASSERT_TRUE(same_bytes(b.data(), b0.data(), bytes)) << "b changed";
  }
  ASSERT_TRUE(a.guards_intact()) << "wrote outside a";
  ASSERT_TRUE(b.guards_intact()) << "wrote outside b";
  ASSERT_TRUE(dst.guards_intact()) << "wrote outside dst";
  ASSERT_TRUE(dst2.guards_intact()) << "wrote outside dst2";
}

// ---- The matrix: ISA x dtype x op, each over counts x aliasing x dst2 x divide_by ----

class ReduceMatrixTest : public ::testing::TestWithParam<std::tuple<CpuIsa, DataType, ReduceOp>> {};

TEST_P(ReduceMatrixTest, MatchesReference) {
  const auto [isa, dtype, op] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << skip_reason(isa);
  std::vector<int> divisors = {1};
  if (op == ReduceOp::kAvg) divisors.push_back(3);
  for (size_t count : kCounts) {
    for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB}) {
      for (bool with_dst2 : {false, true}) {
        for (int divide_by : divisors) {
          Case c{isa, dtype, op, count, alias, with_dst2, divide_by, 0};
          run_case(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(ReduceMatrixTest, UnalignedPointers) {
  const auto [isa, dtype, op] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << skip_reason(isa);
  const int divide_by = op == ReduceOp::kAvg ? 3 : 1;
  // One element off a 64-byte boundary (what a sub-buffer of a tensor gets), and one byte off
  // (no alignment at all).
  for (size_t misalign : {dtype_size(dtype), size_t{1}}) {
    for (size_t count : {size_t{1}, size_t{17}, size_t{1023}, size_t{4099}}) {
      for (Alias alias : {Alias::kNone, Alias::kDstIsB}) {
        Case c{isa, dtype, op, count, alias, true, divide_by, misalign};
        run_case(c);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// True iff `got` equals `want` (the scalar path's output) byte for byte, except where the
// contract allows a difference: any NaN for a NaN, either zero for a zero result of min/max.
::testing::AssertionResult same_as_scalar(DataType dtype, ReduceOp op, const unsigned char* want,
                                          const unsigned char* got, size_t count) {
  const size_t es = dtype_size(dtype);
  if (std::memcmp(want, got, count * es) == 0) return ::testing::AssertionSuccess();
  const bool min_max = op == ReduceOp::kMin || op == ReduceOp::kMax;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(want + i * es, got + i * es, es) == 0) continue;
    bool both_nan = false, both_zero = false;
    if (dtype == DataType::kF32) {
      both_nan = std::isnan(get<float>(want, i)) && std::isnan(get<float>(got, i));
      both_zero = get<float>(want, i) == 0 && get<float>(got, i) == 0;
    } else if (dtype == DataType::kF64) {
      both_nan = std::isnan(get<double>(want, i)) && std::isnan(get<double>(got, i));
      both_zero = get<double>(want, i) == 0 && get<double>(got, i) == 0;
    } else if (dtype == DataType::kBF16) {
      both_nan = bf16_is_nan(get<uint16_t>(want, i)) && bf16_is_nan(get<uint16_t>(got, i));
      both_zero = (get<uint16_t>(want, i) & 0x7FFF) == 0 && (get<uint16_t>(got, i) & 0x7FFF) == 0;
    }
    if (!both_nan && !(min_max && both_zero)) {
      return ::testing::AssertionFailure() << "differs from the scalar path at element " << i;
    }
  }
  return ::testing::AssertionSuccess();
}

// Destinations of kStreamBytesMin and more take the non-temporal path: plain stores up to a
// vector boundary of dst, streamed vectors, then the tail. Compared with the scalar path (which
// the matrix tests compare with the reference) with a head (dst one element off a boundary),
// with dst2 at the same phase as dst (streamed too) and at another phase (not streamed), and in
// place.
class ReduceStreamingTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(ReduceStreamingTest, LargeDestinationsMatchScalarPath) {
  const CpuIsa isa = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << skip_reason(isa);
  struct Layout {
    size_t misalign_bytes;  // of every buffer
    size_t dst2_shift_bytes;
    Alias alias;
  };
  for (DataType dtype : {DataType::kF32, DataType::kBF16}) {
    const size_t es = dtype_size(dtype);
    // Odd, so the stream ends with a tail.
    const size_t count = reduce_internal::kStreamBytesMin / es + 12345;
    const size_t bytes = count * es;
    const std::vector<unsigned char> a0 = random_values(dtype, count, 21);
    const std::vector<unsigned char> b0 = random_values(dtype, count, 22);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::vector<unsigned char> want(bytes);
      ReduceArgs args;
      args.a = a0.data();
      args.b = b0.data();
      args.dst = want.data();
      args.count = count;
      args.dtype = dtype;
      args.op = op;
      reduce_with_isa(args, CpuIsa::kScalar);
      for (const Layout& layout : {Layout{0, 0, Alias::kNone}, Layout{es, 0, Alias::kDstIsA},
                                   Layout{es, es, Alias::kDstIsB}}) {
        SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " " + std::string(dtype_name(dtype)) + " " +
                     std::string(reduce_op_name(op)) + " " + alias_name(layout.alias) +
                     " misalign=" + std::to_string(layout.misalign_bytes) +
                     " dst2_shift=" + std::to_string(layout.dst2_shift_bytes));
        GuardedBuffer a(bytes, layout.misalign_bytes), b(bytes, layout.misalign_bytes);
        GuardedBuffer dst(bytes, layout.misalign_bytes);
        GuardedBuffer dst2(bytes, layout.misalign_bytes + layout.dst2_shift_bytes);
        std::memcpy(a.data(), a0.data(), bytes);
        std::memcpy(b.data(), b0.data(), bytes);
        args.a = a.data();
        args.b = b.data();
        args.dst = layout.alias == Alias::kDstIsA   ? a.data()
                   : layout.alias == Alias::kDstIsB ? b.data()
                                                    : dst.data();
        args.dst2 = dst2.data();
        reduce_with_isa(args, isa);
        const auto* got = static_cast<const unsigned char*>(args.dst);
        ASSERT_TRUE(same_as_scalar(dtype, op, want.data(), got, count));
        ASSERT_EQ(std::memcmp(dst2.data(), got, bytes), 0) << "dst2 differs from dst";
        ASSERT_TRUE(a.guards_intact() && b.guards_intact() && dst.guards_intact() &&
                    dst2.guards_intact())
            << "wrote outside a buffer";
      }
    }
  }
}

// Issue 11: a small call asked to stream its destination (a large collective's output, written
// one message at a time: ReduceArgs::stream_dst) gives the scalar path's results, with dst2
// (a slot) stored plainly at any phase; and copy2_stream_dst copies exactly, at every alignment.
TEST_P(ReduceStreamingTest, ASmallCallAskedToStreamItsDestinationMatchesScalarPath) {
  const CpuIsa isa = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << skip_reason(isa);
  const DataType dtype = DataType::kF32;
  // A shared-memory message and a tail, and calls too short to reach a vector boundary (the
  // last piece of a large op can be a few elements).
  for (const size_t count : {size_t{(64 << 10) / 4 + 13}, size_t{1}, size_t{4}, size_t{17}}) {
    const size_t bytes = count * 4;
    const std::vector<unsigned char> a0 = random_values(dtype, count, 31);
    const std::vector<unsigned char> b0 = random_values(dtype, count, 32);
    std::vector<unsigned char> want(bytes);
    ReduceArgs args;
    args.a = a0.data();
    args.b = b0.data();
    args.dst = want.data();
    args.count = count;
    reduce_with_isa(args, CpuIsa::kScalar);
    for (size_t misalign : {size_t{0}, size_t{4}, size_t{12}}) {
      for (size_t dst2_shift : {size_t{0}, size_t{4}}) {
        SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " count=" + std::to_string(count) +
                     " misalign=" + std::to_string(misalign) +
                     " dst2_shift=" + std::to_string(dst2_shift));
        GuardedBuffer dst(bytes, misalign), dst2(bytes, misalign + dst2_shift);
        args.dst = dst.data();
        args.dst2 = dst2.data();
        args.stream_dst = true;
        reduce_with_isa(args, isa);
        ASSERT_TRUE(same_as_scalar(dtype, ReduceOp::kSum, want.data(), dst.data(), count));
        ASSERT_EQ(std::memcmp(dst2.data(), dst.data(), bytes), 0) << "dst2 differs from dst";
        ASSERT_TRUE(dst.guards_intact() && dst2.guards_intact()) << "wrote outside a buffer";
      }
    }
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{65543}}) {
    for (size_t misalign : {size_t{0}, size_t{3}, size_t{8}}) {
      GuardedBuffer src(n, 1), dst(n, misalign), dst2(n, 5);
      for (size_t i = 0; i < n; ++i)
        src.data()[i] = static_cast<unsigned char>(i * 7 + 1);
      copy2_stream_dst(dst.data(), dst2.data(), src.data(), n);
      ASSERT_EQ(std::memcmp(dst.data(), src.data(), n), 0) << n << " bytes, misalign " << misalign;
      ASSERT_EQ(std::memcmp(dst2.data(), src.data(), n), 0) << n << " bytes, misalign " << misalign;
      ASSERT_TRUE(dst.guards_intact() && dst2.guards_intact()) << n << " bytes";
    }
  }
}

// Every vector path agrees with the scalar path byte for byte on the same inputs (specials
// included), except where the contract allows: any NaN for a NaN, either zero for min/max.
class VectorPathTest : public ReduceMatrixTest {};

TEST_P(VectorPathTest, BitIdenticalToScalarPath) {
  const auto [isa, dtype, op] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << skip_reason(isa);
  constexpr size_t kCount = 100003;
  const std::vector<unsigned char> a = random_values(dtype, kCount, 11);
  const std::vector<unsigned char> b = random_values(dtype, kCount, 12);
  for (int divide_by : {1, 3, 7}) {
    std::vector<unsigned char> want(a.size()), got(a.size());
    ReduceArgs args;
    args.a = a.data();
    args.b = b.data();
    args.count = kCount;
    args.dtype = dtype;
    args.op = op;
    args.divide_by = divide_by;
    args.dst = want.data();
    reduce_with_isa(args, CpuIsa::kScalar);
    args.dst = got.data();
    reduce_with_isa(args, isa);
    ASSERT_TRUE(same_as_scalar(dtype, op, want.data(), got.data(), kCount))
        << cpu_isa_name(isa) << " divide_by=" << divide_by;
  }
}

std::string matrix_name(
    const ::testing::TestParamInfo<std::tuple<CpuIsa, DataType, ReduceOp>>& info) {
  return std::string(cpu_isa_name(std::get<0>(info.param))) + "_" +
         std::string(dtype_name(std::get<1>(info.param))) + "_" +
         std::string(reduce_op_name(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, ReduceMatrixTest,
                         ::testing::Combine(::testing::ValuesIn(kIsas),
                                            ::testing::ValuesIn(kDtypes),
                                            ::testing::ValuesIn(kOps)),
                         matrix_name);
INSTANTIATE_TEST_SUITE_P(VectorPaths, VectorPathTest,
                         ::testing::Combine(::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512),
                                            ::testing::ValuesIn(kDtypes),
                                            ::testing::ValuesIn(kOps)),
                         matrix_name);

// ---- Semantics users rely on, spelled out with literal values ----

class ReduceIsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam())) GTEST_SKIP() << skip_reason(GetParam());
  }
  // Reduces count copies of the pattern (a, b) so the values go through full vectors and tails.
  template <typename T>
  std::vector<T> reduce_pattern(DataType dtype, ReduceOp op, const std::vector<T>& a,
                                const std::vector<T>& b, int divide_by = 1) {
    std::vector<T> dst(a.size());
    ReduceArgs args;
    args.dst = dst.data();
    args.a = a.data();
    args.b = b.data();
    args.count = a.size();
    args.dtype = dtype;
    args.op = op;
    args.divide_by = divide_by;
    reduce_with_isa(args, GetParam());
    return dst;
  }
};

// 37 elements: at least one full vector on every path plus a tail, so NaNs land in both.
constexpr size_t kNanCount = 37;

TEST_P(ReduceIsaTest, FloatNanPropagates) {
  for (ReduceOp op : kOps) {
    std::vector<float> a(kNanCount, 1.5f), b(kNanCount, -2.0f);
    std::vector<double> a64(kNanCount, 1.5), b64(kNanCount, -2.0);
    for (size_t i = 0; i < kNanCount; ++i) {
      if (i % 3 == 1) a[i] = a64[i] = NAN;
      if (i % 5 == 2) b[i] = b64[i] = NAN;
    }
    const std::vector<float> r = reduce_pattern(DataType::kF32, op, a, b, 3);
    const std::vector<double> r64 = reduce_pattern(DataType::kF64, op, a64, b64, 3);
    for (size_t i = 0; i < kNanCount; ++i) {
      const bool nan = i % 3 == 1 || i % 5 == 2;
      EXPECT_EQ(std::isnan(r[i]), nan) << "f32 " << reduce_op_name(op) << " element " << i;
      EXPECT_EQ(std::isnan(r64[i]), nan) << "f64 " << reduce_op_name(op) << " element " << i;
    }
  }
  // Not just "NaN in a" or "NaN in b": the other operand is larger in one case and smaller in the
  // other, which is where a plain MINPS/MAXPS would drop the NaN.
  const std::vector<float> a = {NAN, 1.0f, NAN, -1.0f};
  const std::vector<float> b = {-1.0f, NAN, 1.0f, NAN};
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    for (float v : reduce_pattern(DataType::kF32, op, a, b))
      EXPECT_TRUE(std::isnan(v));
  }
}

TEST_P(ReduceIsaTest, Bf16NanComesOutQuiet) {
  // 0x7F81: signalling NaN; 0xFFC0: negative quiet NaN; 0x3F80: 1.0.
  std::vector<uint16_t> a(kNanCount, 0x3F80), b(kNanCount, 0x3F80);
  for (size_t i = 0; i < kNanCount; i += 4)
    a[i] = 0x7F81;
  for (size_t i = 1; i < kNanCount; i += 4)
    b[i] = 0xFFC0;
  for (ReduceOp op : kOps) {
    const std::vector<uint16_t> r = reduce_pattern(DataType::kBF16, op, a, b, 3);
    for (size_t i = 0; i < kNanCount; ++i) {
      if (i % 4 <= 1) {
        EXPECT_TRUE(bf16_is_nan(r[i]) && (r[i] & 0x0040) != 0)
            << reduce_op_name(op) << " element " << i << " = " << r[i];
      } else {
        EXPECT_EQ(r[i], op == ReduceOp::kSum   ? 0x4000
                        : op == ReduceOp::kAvg ? 0x3F2B
                                               : 0x3F80)
            << reduce_op_name(op) << " element " << i;
      }
    }
  }
}

TEST_P(ReduceIsaTest, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): goes to 0x3F80.
  // (1 + 2^-7) + 2^-8 is halfway between 0x3F81 (odd) and 0x3F82: goes to 0x3F82.
  // 1 + 3 * 2^-9 is above halfway: 0x3F81. max + max overflows to infinity.
  // 1/3 in fp32 is 0x3EAAAAAB, whose low half 0xAAAB is above 0x8000: rounds up to 0x3EAB.
  const std::vector<uint16_t> a = {0x3F80, 0x3F81, 0x3F80, 0x7F7F, 0xFF7F, 0x3F80};
  const std::vector<uint16_t> b = {0x3B80, 0x3B80, 0x3BC0, 0x7F7F, 0xFF7F, 0x0000};
  std::vector<uint16_t> aa, bb;
  for (int rep = 0; rep < 7; ++rep) {  // 42 elements: full vectors and a tail
    aa.insert(aa.end(), a.begin(), a.end());
    bb.insert(bb.end(), b.begin(), b.end());
  }
  const std::vector<uint16_t> sum = reduce_pattern(DataType::kBF16, ReduceOp::kSum, aa, bb);
  const std::vector<uint16_t> want_sum = {0x3F80, 0x3F82, 0x3F81, 0x7F80, 0xFF80, 0x3F80};
  const std::vector<uint16_t> avg = reduce_pattern(DataType::kBF16, ReduceOp::kAvg, aa, bb, 3);
  for (size_t i = 0; i < aa.size(); ++i) {
    EXPECT_EQ(sum[i], want_sum[i % 6]) << "element " << i;
  }
  EXPECT_EQ(avg[5], 0x3EAB);
}

TEST_P(ReduceIsaTest, IntegersWrapAndAvgTruncatesTowardZero) {
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  std::vector<int32_t> a32, b32;
  std::vector<int64_t> a64, b64;
  for (int rep = 0; rep < 9; ++rep) {  // 36 elements
    a32.insert(a32.end(), {kMax32, kMin32, -7, 7});
    b32.insert(b32.end(), {1, -1, 0, 0});
    a64.insert(a64.end(), {kMax64, kMin64, -7, 7});
    b64.insert(b64.end(), {1, -1, 0, 0});
  }
  const auto sum32 = reduce_pattern(DataType::kI32, ReduceOp::kSum, a32, b32);
  const auto avg32 = reduce_pattern(DataType::kI32, ReduceOp::kAvg, a32, b32, 3);
  const auto sum64 = reduce_pattern(DataType::kI64, ReduceOp::kSum, a64, b64);
  const auto avg64 = reduce_pattern(DataType::kI64, ReduceOp::kAvg, a64, b64, 3);
  for (size_t i = 0; i < a32.size(); i += 4) {
    EXPECT_EQ(sum32[i], kMin32);
    EXPECT_EQ(sum32[i + 1], kMax32);
    EXPECT_EQ(avg32[i], -715827882);  // wrapped -2^31, / 3 toward zero (floor would be ...883)
    EXPECT_EQ(avg32[i + 1], 715827882);
    EXPECT_EQ(avg32[i + 2], -2);  // -7 / 3 toward zero, not -3
    EXPECT_EQ(avg32[i + 3], 2);
    EXPECT_EQ(sum64[i], kMin64);
    EXPECT_EQ(sum64[i + 1], kMax64);
    EXPECT_EQ(avg64[i], -3074457345618258602);
    EXPECT_EQ(avg64[i + 1], 3074457345618258602);
    EXPECT_EQ(avg64[i + 2], -2);
    EXPECT_EQ(avg64[i + 3], 2);
  }
}

TEST_P(ReduceIsaTest, AvgWithDivideByOneIsSum) {
  const std::vector<float> a = {1.0f, 2.5f, -3.0f};
  const std::vector<float> b = {0.25f, 2.5f, 1.0f};
  EXPECT_EQ(reduce_pattern(DataType::kF32, ReduceOp::kAvg, a, b, 1),
            reduce_pattern(DataType::kF32, ReduceOp::kSum, a, b, 1));
  EXPECT_EQ(reduce_pattern(DataType::kF32, ReduceOp::kAvg, a, b, 2),
            (std::vector<float>{0.625f, 2.5f, -1.0f}));
}

std::string isa_name(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(cpu_isa_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, ReduceIsaTest, ::testing::ValuesIn(kIsas), isa_name);
INSTANTIATE_TEST_SUITE_P(VectorPaths, ReduceStreamingTest,
                         ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512), isa_name);

TEST(ReduceTest, ReduceUsesTheChosenIsaAndMatchesIt) {
  const std::vector<unsigned char> a = random_values(DataType::kBF16, 1000, 1);
  const std::vector<unsigned char> b = random_values(DataType::kBF16, 1000, 2);
  std::vector<unsigned char> via_reduce(a.size()), via_isa(a.size());
  ReduceArgs args;
  args.a = a.data();
  args.b = b.data();
  args.count = 1000;
  args.dtype = DataType::kBF16;
  args.dst = via_reduce.data();
  reduce(args);
  args.dst = via_isa.data();
  reduce_with_isa(args, reduce_isa());
  EXPECT_EQ(via_reduce, via_isa);
  EXPECT_TRUE(cpu_has(reduce_isa()));
}

TEST(ReduceTest, ZeroCountAcceptsNullPointers) {
  ReduceArgs args;  // all null, count 0
  for (CpuIsa isa : kIsas) {
    if (cpu_has(isa)) reduce_with_isa(args, isa);
  }
  copy2(nullptr, nullptr, nullptr, 0);
}

// ---- Programmer errors are caught before any kernel runs ----

TEST(ReduceDeathTest, RejectsPartialOverlapAndBadDivisor) {
  std::vector<float> buf(64);
  ReduceArgs args;
  args.a = buf.data();
  args.b = buf.data() + 32;
  args.dst = buf.data() + 1;  // overlaps a by all but one element
  args.count = 32;
  EXPECT_DEATH(reduce(args), "dst partially overlaps a");
  args.dst = buf.data() + 32;
  args.dst2 = buf.data() + 40;
  EXPECT_DEATH(reduce(args), "dst partially overlaps dst2");
  args.dst2 = nullptr;
  args.op = ReduceOp::kAvg;
  args.divide_by = 0;
  EXPECT_DEATH(reduce(args), "divide_by must be >= 1");
}

TEST(ReduceDeathTest, RejectsAnIsaTheCpuLacks) {
  if (cpu_has(CpuIsa::kAvx512)) GTEST_SKIP() << "this CPU has every ISA Kiln builds for";
  ReduceArgs args;
  EXPECT_DEATH(reduce_with_isa(args, CpuIsa::kAvx512), "this CPU supports at most");
}

// ---- copy2 ----

TEST(Copy2Test, CopiesToOneOrTwoDestinations) {
  // Around the 8 KiB copy chunk, and unaligned.
  for (size_t bytes :
       {size_t{1}, size_t{7}, size_t{8191}, size_t{8192}, size_t{8193}, size_t{100003}}) {
    for (size_t misalign : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("bytes=" + std::to_string(bytes) + " misalign=" + std::to_string(misalign));
      const std::vector<unsigned char> want = random_values(DataType::kI32, bytes / 4 + 1, bytes);
      GuardedBuffer src(bytes, misalign), dst(bytes, misalign), dst2(bytes, misalign);
      std::memcpy(src.data(), want.data(), bytes);
      copy2(dst.data(), dst2.data(), src.data(), bytes);
      EXPECT_EQ(std::memcmp(dst.data(), want.data(), bytes), 0);
      EXPECT_EQ(std::memcmp(dst2.data(), want.data(), bytes), 0);
      std::memset(dst.data(), 0, bytes);
      std::memset(dst2.data(), 0, bytes);
      copy2(dst.data(), nullptr, src.data(), bytes);
      EXPECT_EQ(std::memcmp(dst.data(), want.data(), bytes), 0);
      EXPECT_EQ(dst2.data()[0], 0) << "dst2 written though null";
      EXPECT_EQ(std::memcmp(src.data(), want.data(), bytes), 0) << "src changed";
      EXPECT_TRUE(src.guards_intact() && dst.guards_intact() && dst2.guards_intact());
    }
  }
}

TEST(Copy2Test, DestinationMayBeTheSource) {
  std::vector<unsigned char> src(20000), other(20000, 0);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<unsigned char>(i * 7 + 3);
  const std::vector<unsigned char> want = src;
  copy2(src.data(), other.data(), src.data(), src.size());
  EXPECT_EQ(src, want);
  EXPECT_EQ(other, want);
  std::fill(other.begin(), other.end(), 0);
  copy2(other.data(), src.data(), src.data(), src.size());
  EXPECT_EQ(other, want);
  copy2(src.data(), src.data(), src.data(), src.size());
  EXPECT_EQ(src, want);
}

TEST(Copy2DeathTest, RejectsPartialOverlap) {
  std::vector<unsigned char> buf(100);
  EXPECT_DEATH(copy2(buf.data() + 1, nullptr, buf.data(), 50), "dst partially overlaps src");
}

// ---- KILN_COMM_ISA ----

using reduce_internal::choose_reduce_isa;

CpuIsa chosen(CpuIsa best, const char* request) {
  const Result<CpuIsa> isa = choose_reduce_isa(best, request);
  EXPECT_TRUE(isa.ok()) << isa.status().to_string();
  return isa.ok() ? *isa : CpuIsa::kScalar;
}

TEST(ReduceIsaChoiceTest, BestUnlessALowerOneIsAsked) {
  EXPECT_EQ(chosen(CpuIsa::kAvx512, nullptr), CpuIsa::kAvx512);
  EXPECT_EQ(chosen(CpuIsa::kAvx512, ""), CpuIsa::kAvx512);
  EXPECT_EQ(chosen(CpuIsa::kAvx512, "avx512"), CpuIsa::kAvx512);
  EXPECT_EQ(chosen(CpuIsa::kAvx512, "avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(chosen(CpuIsa::kAvx512, "scalar"), CpuIsa::kScalar);
  EXPECT_EQ(chosen(CpuIsa::kAvx2, "scalar"), CpuIsa::kScalar);
  EXPECT_EQ(chosen(CpuIsa::kScalar, nullptr), CpuIsa::kScalar);
}

// Issue 10: a bad KILN_COMM_ISA is an error value naming the variable and the accepted values,
// not a KILN_CHECK abort.
TEST(ReduceIsaChoiceTest, AHigherOrUnknownRequestIsAnErrorNamingBoth) {
  const Status higher = choose_reduce_isa(CpuIsa::kAvx2, "avx512").status();
  EXPECT_TRUE(higher.is_not_supported()) << higher.to_string();
  EXPECT_EQ(higher.message(),
            "KILN_COMM_ISA=avx512 asks for avx512 but this CPU supports at most avx2 (accepted "
            "here: scalar, avx2)");
  EXPECT_NE(choose_reduce_isa(CpuIsa::kScalar, "avx2").status().message().find("at most scalar"),
            std::string::npos);
  const Status unknown = choose_reduce_isa(CpuIsa::kAvx512, "sse9").status();
  EXPECT_TRUE(unknown.is_invalid_argument()) << unknown.to_string();
  EXPECT_EQ(unknown.message(),
            "KILN_COMM_ISA='sse9' is not an ISA: accepted are scalar, avx2 and avx512 (this CPU "
            "runs scalar, avx2, avx512), or unset for the best");
}

// reduce_isa() reads the environment once per process, so each case runs in a fresh child: the
// "threadsafe" death-test style re-executes this binary for the statement, and the child exits
// with the ISA it chose.
[[noreturn]] void isa_chosen_in_child_with(const char* request) {
  if (request == nullptr) {
    unsetenv("KILN_COMM_ISA");
  } else {
    setenv("KILN_COMM_ISA", request, 1);
  }
  std::_Exit(static_cast<int>(reduce_isa()));
}

TEST(ReduceIsaEnvDeathTest, RespectsALowerRequest) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int best = static_cast<int>(best_isa());
  EXPECT_EXIT(isa_chosen_in_child_with(nullptr), ::testing::ExitedWithCode(best), "");
  EXPECT_EXIT(isa_chosen_in_child_with("scalar"), ::testing::ExitedWithCode(0), "");
  if (cpu_has(CpuIsa::kAvx2)) {
    EXPECT_EXIT(isa_chosen_in_child_with("avx2"), ::testing::ExitedWithCode(1), "");
  }
}

TEST(ReduceIsaEnvDeathTest, AnUnsupportedRequestFails) {
  if (cpu_has(CpuIsa::kAvx512)) {
    GTEST_SKIP() << "this CPU has avx512, so no KILN_COMM_ISA request is unsupported here "
                    "(choose_reduce_isa's death test covers the rule)";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(isa_chosen_in_child_with("avx512"), "asks for avx512 but this CPU supports at most");
}

}  // namespace
}  // namespace kiln::comm
