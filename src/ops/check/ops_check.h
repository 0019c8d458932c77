// ops-check: every public kiln_ops op, on every ISA, against the double-precision references.
//
// For each op (forward and backward are separate rows) a few shapes are run: odd sizes, batch 1
// and more, strided layouts where the op allows them, attention with D in {32, 64, 80, 128},
// T in {1, 67, 200} causal and not, cross-entropy with a padded vocabulary. Each case runs the
// reference and the public function (through a Context with the ISA and pool asked for) on
// identical copies of every buffer, and compares every buffer afterwards with the op's tolerance
// (op_tolerance): the outputs, and also the inputs and the gaps of strided views, which must come
// back untouched. An op that returns an error (kNotSupported for a missing variant) is a row with
// ok = false and the error's text.
//
// This is the kernels' main correctness test (src/ops/check/ops_check_test.cc runs it per family
// and ISA) and what `kiln ops-check` prints. Private to kiln_ops; the CLI includes it directly.
#ifndef KILN_OPS_CHECK_OPS_CHECK_H_
#define KILN_OPS_CHECK_OPS_CHECK_H_

#include <kiln/base/cpu.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/context.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ops {

struct OpCheckRow {
  std::string op;  // "layernorm_forward"
  CpuIsa isa = CpuIsa::kScalar;
  std::string gemm;   // the GEMM library the matmul rows ran ("openblas", "onednn"); else empty
  std::string shape;  // "N=67 C=129 row_stride=133"
  double max_rel_err = 0;  // over every buffer: max |got - want| / max(|want|, floor)
  double tolerance = 0;
  bool ok = false;
  std::string error;  // non-empty if the op returned an error
  std::string worst;  // the buffer where max_rel_err was found ("" when every buffer matched)
};

// The families of ops, one public header each; ops_check_test.cc has one test per family and ISA.
enum class OpFamily {
  kMatmul,        // matmul_forward, matmul_backward
  kAttention,     // attention_forward, attention_backward
  kNorm,          // layernorm_*, rmsnorm_*
  kElementwise,   // gelu_*, residual_*
  kEmbedding,     // embedding_*
  kCrossEntropy,  // cross_entropy_*
  kOptimizer,     // adamw_update, global_grad_norm
  kConvert,       // convert_f32_to_bf16, convert_bf16_to_f32
};
inline constexpr std::array<OpFamily, 8> kOpFamilies = {
    OpFamily::kMatmul,    OpFamily::kAttention,    OpFamily::kNorm,      OpFamily::kElementwise,
    OpFamily::kEmbedding, OpFamily::kCrossEntropy, OpFamily::kOptimizer, OpFamily::kConvert};
std::string_view op_family_name(OpFamily family);  // "matmul", "cross_entropy", ...

// The functions ops-check runs against the references: the public ones (public_ops()), or test
// doubles that check the checker. A null entry yields rows with ok = false ("not available").
struct OpTable {
  Status (*matmul_forward)(const MatmulParams&, const Context&) = nullptr;
  Status (*matmul_backward)(const MatmulBackwardParams&, const Context&) = nullptr;
  Status (*attention_forward)(const AttentionParams&, const Context&) = nullptr;
  Status (*attention_backward)(const AttentionBackwardParams&, const Context&) = nullptr;
  Status (*layernorm_forward)(const LayerNormParams&, const Context&) = nullptr;
  Status (*layernorm_backward)(const LayerNormBackwardParams&, const Context&) = nullptr;
  Status (*rmsnorm_forward)(const RmsNormParams&, const Context&) = nullptr;
  Status (*rmsnorm_backward)(const RmsNormBackwardParams&, const Context&) = nullptr;
  Status (*gelu_forward)(const GeluParams&, const Context&) = nullptr;
  Status (*gelu_backward)(const GeluBackwardParams&, const Context&) = nullptr;
  Status (*residual_forward)(const ResidualParams&, const Context&) = nullptr;
  Status (*residual_backward)(const ResidualBackwardParams&, const Context&) = nullptr;
  Status (*embedding_forward)(const EmbeddingParams&, const Context&) = nullptr;
  Status (*embedding_backward)(const EmbeddingBackwardParams&, const Context&) = nullptr;
  Status (*cross_entropy_forward)(const CrossEntropyParams&, const Context&) = nullptr;
  Status (*cross_entropy_backward)(const CrossEntropyBackwardParams&, const Context&) = nullptr;
  Status (*adamw_update)(const AdamWParams&, const Context&) = nullptr;
  Result<double> (*global_grad_norm)(const std::vector<TensorView>&, const Context&) = nullptr;
  Status (*convert_f32_to_bf16)(const TensorView&, const TensorView&, const Context&) = nullptr;
  Status (*convert_bf16_to_f32)(const TensorView&, const TensorView&, const Context&) = nullptr;
};

// The public functions of include/kiln/ops/*.h.
OpTable public_ops();
// The references (src/ops/ref/ref.h) behind the same signatures, ignoring the Context: checked
// against themselves every row must match exactly, which tests ops-check itself.
OpTable reference_ops();

// How close an op must come to its reference: max |got - want| / max(|want|, floor) over every
// element of every buffer must not exceed max_rel_err. The values and their reasons are in
// ops_check.cc.
struct OpTolerance {
  double max_rel_err = 0;
  double floor = 0;
};
// KILN_CHECKs that `op` is one of the public ops.
OpTolerance op_tolerance(std::string_view op);

// The rows of one family on one ISA, running `ops` with Context{isa, pool, gemm}.
std::vector<OpCheckRow> check_op_family(OpFamily family, const OpTable& ops, CpuIsa isa,
                                        ThreadPool* pool, uint64_t seed,
                                        GemmLibrary gemm = GemmLibrary::kOpenBlas);

// Runs every public op (forward and backward as separate rows, e.g. "layernorm_forward") on each
// ISA in `isas` for a few random shapes, comparing every output buffer with the reference; the
// matmuls once with each GEMM library (whichever a machine's race chooses is verified).
// `pool` may be null (single-threaded).
std::vector<OpCheckRow> run_ops_check(const std::vector<CpuIsa>& isas, ThreadPool* pool,
                                      uint64_t seed);

}  // namespace kiln::ops

#endif  // KILN_OPS_CHECK_OPS_CHECK_H_
