// The kernels' main correctness tests: ops-check per op family and ISA (so ctest names the
// failing family and ISA), single-threaded and on a pool of 3 threads (an odd count, so work does
// not split evenly). Then tests of the checker itself, with test doubles built on the
// references: it must pass the references against themselves exactly and catch a wrong value, a
// write into a gap, an ignored overwrite, a changed input and a returned error.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "ops/check/ops_check.h"
#include "ops/ref/ref.h"

namespace kiln::ops {
namespace {

constexpr uint64_t kSeed = 2024;
constexpr int kPoolThreads = 3;

std::string describe(const OpCheckRow& row) {
  std::ostringstream out;
  out << row.op << " [" << cpu_isa_name(row.isa) << "] " << row.shape
      << ": max_rel_err=" << row.max_rel_err << " tolerance=" << row.tolerance;
  if (!row.worst.empty()) out << " worst=" << row.worst;
  if (!row.error.empty()) out << " error=" << row.error;
  return out.str();
}

bool isa_supported(CpuIsa isa) {
  for (CpuIsa supported : supported_isas()) {
    if (supported == isa) return true;
  }
  return false;
}

class OpsCheckTest : public ::testing::TestWithParam<std::tuple<OpFamily, CpuIsa>> {};

TEST_P(OpsCheckTest, EveryOpMatchesItsReference) {
  const auto [family, isa] = GetParam();
  if (!isa_supported(isa)) {
    GTEST_SKIP() << "this CPU cannot run " << cpu_isa_name(isa) << " kernels";
  }
  ThreadPool pool(kPoolThreads);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (GemmLibrary gemm : {GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn}) {
      const std::vector<OpCheckRow> rows =
          check_op_family(family, public_ops(), isa, p, kSeed, gemm);
      ASSERT_FALSE(rows.empty());
      for (const OpCheckRow& row : rows) {
        EXPECT_TRUE(row.ok) << describe(row) << " threads=" << (p ? p->size() : 1)
                            << " gemm=" << gemm_library_name(gemm);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, OpsCheckTest,
                         ::testing::Combine(::testing::ValuesIn(kOpFamilies),
                                            ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2,
                                                              CpuIsa::kAvx512)),
                         [](const ::testing::TestParamInfo<OpsCheckTest::ParamType>& param) {
                           return std::string(op_family_name(std::get<0>(param.param))) + "_" +
                                  std::string(cpu_isa_name(std::get<1>(param.param)));
                         });

std::vector<OpCheckRow> rows_of(const std::vector<OpCheckRow>& rows, const std::string& op) {
  std::vector<OpCheckRow> out;
  for (const OpCheckRow& row : rows) {
    if (row.op == op) out.push_back(row);
  }
  return out;
}

TEST(OpsCheckMachineryTest, TheReferencesMatchThemselvesExactly) {
  for (OpFamily family : kOpFamilies) {
    for (const OpCheckRow& row :
         check_op_family(family, reference_ops(), CpuIsa::kScalar, nullptr, kSeed)) {
      EXPECT_TRUE(row.ok) << describe(row);
      EXPECT_EQ(row.max_rel_err, 0.0) << describe(row);
      EXPECT_TRUE(row.worst.empty()) << describe(row);
    }
  }
}

TEST(OpsCheckMachineryTest, CatchesAWrongValue) {
  OpTable ops = reference_ops();
  // One element of y off by 0.01 (y is at most 5 in magnitude): far above GELU's tolerance.
  ops.gelu_forward = [](const GeluParams& p, const Context&) -> Status {
    KILN_RETURN_IF_ERROR(ref::gelu_forward(p));
    p.y.f32_ptr()[p.y.numel() - 1] += 0.01f;
    return Status();
  };
  const std::vector<OpCheckRow> rows =
      rows_of(check_op_family(OpFamily::kElementwise, ops, CpuIsa::kScalar, nullptr, kSeed),
              "gelu_forward");
  ASSERT_FALSE(rows.empty());
  for (const OpCheckRow& row : rows) {
    EXPECT_FALSE(row.ok) << describe(row);
    EXPECT_GE(row.max_rel_err, 1e-3) << describe(row);
  }
  EXPECT_EQ(rows[0].worst, "y");
}

TEST(OpsCheckMachineryTest, CatchesAWriteIntoTheGapOfAStridedView) {
  OpTable ops = reference_ops();
  // Writes one element past the end of each row (into the gap when rows are strided).
  ops.layernorm_forward = [](const LayerNormParams& p, const Context&) -> Status {
    KILN_RETURN_IF_ERROR(ref::layernorm_forward(p));
    if (p.y.stride[0] > p.y.shape[1]) p.y.f32_ptr()[p.y.shape[1]] = 0.0f;
    return Status();
  };
  const std::vector<OpCheckRow> rows = rows_of(
      check_op_family(OpFamily::kNorm, ops, CpuIsa::kScalar, nullptr, kSeed), "layernorm_forward");
  int strided = 0;
  for (const OpCheckRow& row : rows) {
    if (row.shape.find("row_stride") == std::string::npos) {
      EXPECT_TRUE(row.ok) << describe(row);
      continue;
    }
    ++strided;
    EXPECT_FALSE(row.ok) << describe(row);
    EXPECT_EQ(row.worst, "y") << describe(row);
  }
  EXPECT_GT(strided, 0);
}

TEST(OpsCheckMachineryTest, CatchesAnOutputAccumulatedInsteadOfOverwritten) {
  OpTable ops = reference_ops();
  ops.matmul_backward = [](const MatmulBackwardParams& p, const Context&) {
    MatmulBackwardParams always_accumulate = p;
    always_accumulate.accumulate_dx = true;
    return reference_ops().matmul_backward(always_accumulate, Context{});  // widens bf16 views
  };
  int overwrite_rows = 0;
  for (const OpCheckRow& row :
       rows_of(check_op_family(OpFamily::kMatmul, ops, CpuIsa::kScalar, nullptr, kSeed),
               "matmul_backward")) {
    const bool overwrites = row.shape.ends_with(" dx");
    overwrite_rows += overwrites;
    EXPECT_EQ(row.ok, !overwrites) << describe(row);
    if (overwrites) {
      EXPECT_EQ(row.worst, "dx") << describe(row);
    }
  }
  EXPECT_GT(overwrite_rows, 0);
}

TEST(OpsCheckMachineryTest, CatchesAChangedInput) {
  OpTable ops = reference_ops();
  ops.cross_entropy_forward = [](const CrossEntropyParams& p, const Context&) -> Status {
    KILN_RETURN_IF_ERROR(ref::cross_entropy_forward(p));
    p.logits.f32_ptr()[0] += 1.0f;
    return Status();
  };
  for (const OpCheckRow& row :
       rows_of(check_op_family(OpFamily::kCrossEntropy, ops, CpuIsa::kScalar, nullptr, kSeed),
               "cross_entropy_forward")) {
    EXPECT_FALSE(row.ok) << describe(row);
    EXPECT_EQ(row.worst, "logits") << describe(row);
  }
}

TEST(OpsCheckMachineryTest, AnErrorOrAMissingFunctionIsAFailedRowWithItsText) {
  OpTable ops = reference_ops();
  ops.convert_f32_to_bf16 = [](const TensorView&, const TensorView&, const Context&) {
    return Status::not_supported("convert_f32_to_bf16: no avx512 kernel");
  };
  ops.convert_bf16_to_f32 = nullptr;
  const std::vector<OpCheckRow> rows =
      check_op_family(OpFamily::kConvert, ops, CpuIsa::kScalar, nullptr, kSeed);
  ASSERT_FALSE(rows.empty());
  for (const OpCheckRow& row : rows) {
    EXPECT_FALSE(row.ok) << describe(row);
    const std::string want = row.op == "convert_f32_to_bf16"
                                 ? "NotSupported: convert_f32_to_bf16: no avx512 kernel"
                                 : "convert_bf16_to_f32: not available in this build";
    EXPECT_EQ(row.error, want);
  }
}

TEST(OpsCheckMachineryTest, RunOpsCheckCoversEveryOpOnEveryIsaAskedFor) {
  // With a table of nothing, every row fails fast; what matters here is which rows exist.
  const std::set<std::string> all_ops = {
      "matmul_forward",    "matmul_backward",    "attention_forward",     "attention_backward",
      "layernorm_forward", "layernorm_backward", "rmsnorm_forward",       "rmsnorm_backward",
      "gelu_forward",      "gelu_backward",      "residual_forward",      "residual_backward",
      "embedding_forward", "embedding_backward", "cross_entropy_forward", "cross_entropy_backward",
      "adamw_update",      "global_grad_norm",   "convert_f32_to_bf16",   "convert_bf16_to_f32"};
  std::set<std::string> seen;
  for (OpFamily family : kOpFamilies) {
    for (const OpCheckRow& row : check_op_family(family, OpTable{}, CpuIsa::kScalar, nullptr, 1)) {
      seen.insert(row.op);
      EXPECT_FALSE(row.ok);
      EXPECT_GE(op_tolerance(row.op).max_rel_err, 0.0) << row.op;  // every op has an entry
    }
  }
  EXPECT_EQ(seen, all_ops);
}

TEST(OpsCheckMachineryTest, AttentionCoversTheHeadDimsAndLengthsAsked) {
  std::set<std::string> dims;
  bool causal = false;
  bool full = false;
  for (const OpCheckRow& row :
       check_op_family(OpFamily::kAttention, OpTable{}, CpuIsa::kScalar, nullptr, 1)) {
    for (const char* d : {"D=32", "D=64", "D=80", "D=128"}) {
      if (row.shape.find(std::string(d) + " ") != std::string::npos) dims.insert(d);
    }
    causal |= row.shape.find("causal") != std::string::npos;
    full |= row.shape.find("full") != std::string::npos;
  }
  EXPECT_EQ(dims.size(), 4u);
  EXPECT_TRUE(causal && full);
}

}  // namespace
}  // namespace kiln::ops
