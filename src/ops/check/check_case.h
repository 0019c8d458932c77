// The pieces of ops-check (ops_check.h) that build and run one check: a case is one op on one
// shape, with every buffer it touches and two ways to run it, the reference and the function
// under test. Private to src/ops/check/.
//
// Both runs start from identical copies of the buffers, and afterwards every buffer is compared
// whole, including the gaps of strided views and the inputs: a kernel that writes past a row,
// into a padding gap or into an input shows up as an error there, not only one that computes a
// wrong value. Overwritten outputs start as NaN, so a kernel that reads one (accumulating into
// what should be overwritten) or skips an element fails; gaps start as NaN too, so reading one
// poisons the result.
#ifndef KILN_OPS_CHECK_CHECK_CASE_H_
#define KILN_OPS_CHECK_CHECK_CASE_H_

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ops/check/ops_check.h"

namespace kiln::ops::check {

// One named buffer of a case. Exactly one of the vectors is used, as `kind` says; f64 holds
// scalar results that are not tensors (global_grad_norm's norm).
struct Buffer {
  enum class Kind { kF32, kI32, kBf16, kF64 };
  std::string name;
  Kind kind = Kind::kF32;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  std::vector<uint16_t> bf16;
  std::vector<double> f64;
};

// The buffers of one case, addressed by the index add_*() returned.
class Buffers {
 public:
  int add_f32(std::string name, std::vector<float> values);
  int add_i32(std::string name, std::vector<int32_t> values);
  int add_bf16(std::string name, std::vector<uint16_t> values);
  int add_f64(std::string name, size_t count);

  // A contiguous view of buffer `id` (f32, i32 or bf16 by its kind). Views point into this
  // object's storage: each run works on its own copy of a case's Buffers.
  TensorView view(int id, std::initializer_list<int64_t> shape);
  // A strided view of buffer `id` starting `offset` elements in.
  TensorView strided(int id, int64_t offset, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> stride);
  double* f64(int id);

  const std::vector<Buffer>& all() const { return buffers_; }

 private:
  int add(std::string name, Buffer::Kind kind, Buffer b);
  void* data(int id);

  std::vector<Buffer> buffers_;
};

struct Case {
  std::string op;     // the public function, e.g. "layernorm_forward"
  std::string shape;  // sizes and layout, e.g. "N=67 C=129 row_stride=133"
  Buffers buffers;    // the initial contents, copied for each run
  std::function<Status(Buffers&)> run_ref;
  // Null when the function under test is missing from the OpTable.
  std::function<Status(Buffers&, const Context&)> run_op;
  // The case's own bar where it is not op_tolerance(op)'s (bf16 attention).
  std::optional<OpTolerance> tolerance;
};

// The bar of attention with bf16 inputs (`op` attention_forward or _backward), against the
// reference on the same bf16 values: ops_check.cc says why.
OpTolerance bf16_attention_tolerance(std::string_view op);

// Runs `c` with the reference and with the function under test on `ctx` and compares every
// buffer with `tol`.
OpCheckRow run_case(const Case& c, const Context& ctx, const OpTolerance& tol);

// Random inputs for a case: uniform values from a generator seeded per case, so a case's inputs
// do not depend on which other cases run.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  std::vector<float> uniform(int64_t count, float lo, float hi);
  // Values in [lo, hi) with every element outside the view (the gaps of a view of `rows` rows of
  // `cols` elements, `row_stride` apart) set to NaN.
  std::vector<float> uniform_rows(int64_t rows, int64_t cols, int64_t row_stride, float lo,
                                  float hi);
  std::vector<int32_t> ids(int64_t count, int32_t bound);  // in [0, bound)
  uint64_t bits() { return engine_(); }                    // 64 random bits

 private:
  std::mt19937_64 engine_;
};

// `count` NaNs: the initial contents of an output that must be overwritten.
std::vector<float> nans(int64_t count);

// The seed of case `index` of `op`: distinct per op and case, reproducible from `seed`.
uint64_t case_seed(uint64_t seed, std::string_view op, int index);

// Sets c.run_ref and c.run_op (the latter only when `op` is not null) to call `ref` and `op` with
// the params `params` builds from a run's buffers.
template <typename Params, typename MakeParams>
void bind(Case& c, MakeParams params, Status (*ref)(const Params&),
          Status (*op)(const Params&, const Context&)) {
  c.run_ref = [params, ref](Buffers& b) { return ref(params(b)); };
  if (op != nullptr) {
    c.run_op = [params, op](Buffers& b, const Context& ctx) { return op(params(b), ctx); };
  }
}

// The cases of each op family, with `ops`' function for run_op (null when absent). `seed` makes
// the inputs reproducible.
std::vector<Case> matmul_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> attention_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> norm_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> elementwise_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> embedding_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> cross_entropy_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> optimizer_cases(const OpTable& ops, uint64_t seed);
std::vector<Case> convert_cases(const OpTable& ops, uint64_t seed);

}  // namespace kiln::ops::check

#endif  // KILN_OPS_CHECK_CHECK_CASE_H_
