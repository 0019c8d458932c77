// Tests of bf16 <-> f32 conversion on every ISA this CPU runs (the others skip, visibly): bit
// for bit against the references (which round by comparing distances, not by the kernels' bit
// trick) on every bf16 value, on the hard f32 cases (ties, subnormals, overflow to infinity,
// signalling NaNs) and on random bit patterns; sizes around every vector width with guard
// elements after the end (a bad tail mask would write them); identical results with 1 and 2
// threads; validation errors.
//
// Tolerance: none. Both directions are exact functions of the bits. The one freedom the header
// leaves is a NaN's payload: the kernels keep the sign and top payload bits and set the quiet
// bit, the reference returns the canonical quiet NaN of that sign, so NaNs are compared by
// sign and quietness.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/convert.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/ref/ref.h"

namespace kiln::ops {
namespace {

// Elements after the end of each output that must stay untouched: two AVX-512 vectors.
constexpr size_t kGuard = 32;
constexpr uint16_t kGuardBf16 = 0xA5A5;
constexpr uint32_t kGuardF32 = 0xA5A5A5A5u;

// Sizes around every vector width (8, 16 floats; 16, 32 bf16), the 32 Ki-element task chunk and
// a large prime.
const int64_t kSizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 1000, 32785, 100003};

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

// Bit patterns where rounding to bf16 is delicate, followed by random ones.
std::vector<uint32_t> f32_patterns(size_t n, uint64_t seed) {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u,               // +-0
      0x7F800000u, 0xFF800000u,               // +-inf
      0x7FC00000u, 0xFFC00001u,               // quiet NaNs
      0x7F800001u, 0xFF80FFFFu, 0x7FBF0000u,  // signalling NaNs: truncation would give inf
      0x00000001u, 0x00008000u, 0x00018000u, 0x0000FFFFu, 0x807FFFFFu,  // subnormals, ties
      0x3F808000u, 0x3F818000u, 0x3F808001u, 0xBF807FFFu,  // ties to even, just off ties
      0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0xFF7F8000u,  // past the largest bf16: inf
      0x3F800000u, 0x40490FDBu};                           // 1, pi
  std::mt19937_64 rng(seed);
  while (bits.size() < n)
    bits.push_back(static_cast<uint32_t>(rng()));
  bits.resize(n);
  return bits;
}

bool is_nan_bf16(uint16_t h) {
  return (h & 0x7F80u) == 0x7F80u && (h & 0x007Fu) != 0;
}

// got equals want bit for bit, or both are NaNs of the same sign and got is quiet.
bool same_bf16(uint16_t got, uint16_t want) {
  if (is_nan_bf16(want)) {
    return is_nan_bf16(got) && (got & 0x8000u) == (want & 0x8000u) && (got & 0x0040u) != 0;
  }
  return got == want;
}

class ConvertTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << cpu_isa_name(GetParam())
                   << " (best: " << cpu_isa_name(detect_cpu_features().best_isa()) << ")";
    }
  }
  Context context(ThreadPool* pool = nullptr) const {
    Context ctx;
    ctx.isa = GetParam();
    ctx.pool = pool;
    return ctx;
  }
};

INSTANTIATE_TEST_SUITE_P(Isa, ConvertTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

// Converts n f32 values (the first n patterns) to bf16 through `ctx`, or the reference when
// ctx is null; the output has kGuard guard elements after the end, which must stay untouched.
std::vector<uint16_t> to_bf16(std::vector<uint32_t> bits, const Context* ctx) {
  const int64_t n = static_cast<int64_t>(bits.size());
  std::vector<float> src(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    src[i] = std::bit_cast<float>(bits[i]);
  std::vector<uint16_t> dst(bits.size() + kGuard, kGuardBf16);
  const TensorView s = TensorView::f32(src.data(), {n});
  const TensorView d = TensorView::of(dst.data(), DType::kBF16, {n});
  const Status st =
      ctx == nullptr ? ref::convert_f32_to_bf16(s, d) : convert_f32_to_bf16(s, d, *ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  for (size_t i = bits.size(); i < dst.size(); ++i)
    EXPECT_EQ(dst[i], kGuardBf16) << "guard element " << i - bits.size() << " was written";
  dst.resize(bits.size());
  return dst;
}

TEST_P(ConvertTest, F32ToBf16RoundsToNearestEvenLikeTheReference) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<uint32_t> bits = f32_patterns(static_cast<size_t>(n), 1);
    const Context ctx = context();
    const std::vector<uint16_t> got = to_bf16(bits, &ctx);
    const std::vector<uint16_t> want = to_bf16(bits, nullptr);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(same_bf16(got[i], want[i]))
          << std::hex << "f32 0x" << bits[i] << ": got 0x" << got[i] << ", want 0x" << want[i];
    }
  }
}

TEST_P(ConvertTest, Bf16ToF32IsExactForEveryValue) {
  constexpr int64_t kValues = 65536;
  std::vector<uint16_t> src(kValues);
  for (int64_t i = 0; i < kValues; ++i)
    src[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    // The last n bf16 values (the NaNs and the negative numbers are at the top), wrapping
    // around past 65536.
    std::vector<uint16_t> first(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      first[static_cast<size_t>(i)] = static_cast<uint16_t>(kValues - n + i);
    std::vector<float> got(static_cast<size_t>(n) + kGuard, std::bit_cast<float>(kGuardF32));
    ASSERT_TRUE(convert_bf16_to_f32(TensorView::of(first.data(), DType::kBF16, {n}),
                                    TensorView::f32(got.data(), {n}), context())
                    .ok());
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), static_cast<uint32_t>(first[i]) << 16) << i;
    for (size_t i = static_cast<size_t>(n); i < got.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), kGuardF32) << "guard element written";
  }
  // Every value, against the reference.
  std::vector<float> got(kValues), want(kValues);
  const TensorView s = TensorView::of(src.data(), DType::kBF16, {kValues});
  ASSERT_TRUE(convert_bf16_to_f32(s, TensorView::f32(got.data(), {kValues}), context()).ok());
  ASSERT_TRUE(ref::convert_bf16_to_f32(s, TensorView::f32(want.data(), {kValues})).ok());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i;
}

TEST_P(ConvertTest, RoundTripOfEveryBf16IsExact) {
  constexpr int64_t kValues = 65536;
  std::vector<uint16_t> src(kValues), back(kValues);
  for (int64_t i = 0; i < kValues; ++i)
    src[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  std::vector<float> wide(kValues);
  ASSERT_TRUE(convert_bf16_to_f32(TensorView::of(src.data(), DType::kBF16, {kValues}),
                                  TensorView::f32(wide.data(), {kValues}), context())
                  .ok());
  ASSERT_TRUE(convert_f32_to_bf16(TensorView::f32(wide.data(), {kValues}),
                                  TensorView::of(back.data(), DType::kBF16, {kValues}), context())
                  .ok());
  for (size_t i = 0; i < src.size(); ++i) {
    // A signalling NaN comes back quiet; everything else comes back as it was.
    if (is_nan_bf16(src[i])) {
      EXPECT_EQ(back[i], src[i] | 0x0040u) << std::hex << src[i];
    } else {
      EXPECT_EQ(back[i], src[i]) << std::hex << src[i];
    }
  }
}

TEST_P(ConvertTest, ResultsAreIdenticalWithOneAndTwoThreads) {
  constexpr int64_t n = (int64_t{1} << 20) + 7;
  const std::vector<uint32_t> bits = f32_patterns(static_cast<size_t>(n), 2);
  ThreadPool pool(2);
  const Context one = context();
  const Context two = context(&pool);
  EXPECT_EQ(to_bf16(bits, &one), to_bf16(bits, &two));
}

TEST_P(ConvertTest, InvalidViewsAreRejectedNamingTheOperand) {
  std::vector<float> f(4, 1.0f);
  std::vector<uint16_t> h(4, kGuardBf16);
  Status st = convert_f32_to_bf16(TensorView::f32(f.data(), {4}), TensorView::f32(f.data(), {4}),
                                  context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("convert_f32_to_bf16: dst is f32[4] but must be bf16"),
            std::string::npos)
      << st.message();
  st = convert_bf16_to_f32(TensorView::of(h.data(), DType::kBF16, {4}),
                           TensorView::f32(f.data(), {3}), context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("convert_bf16_to_f32: dst (f32[3]) has 3 elements, expected 4"),
            std::string::npos)
      << st.message();
  for (float v : f)
    EXPECT_EQ(v, 1.0f);
  for (uint16_t v : h)
    EXPECT_EQ(v, kGuardBf16);
}

}  // namespace
}  // namespace kiln::ops
