// Matmul: the linear layers of a transformer, through a GEMM library, with the bias folded in.
//
//   forward:  y = x @ w^T + bias              x (M, K), w (N, K), bias (N) or absent, y (M, N)
//   backward: dx (=|+=) dy @ w                dy (M, N) -> dx (M, K)
//             dw += dy^T @ x                   -> dw (N, K)
//             dbias += sum over rows of dy     -> dbias (N)
//
// w is stored (out_features, in_features) as in PyTorch's nn.Linear and llm.c. Every view must
// have a unit stride in its last dimension; leading strides may be larger (a slice of a wider
// buffer).
//
// Precision: the inputs x, w (and dy) are all f32 or all bf16; the outputs y, dx, dw, the bias
// and dbias are always f32. f32 inputs go through the Context's library (OpenBLAS or oneDNN's
// sgemm); bf16 inputs, at AVX-512, through oneDNN's bf16 matmul (AMX tiles or AVX512-BF16 dot
// products where the CPU has them), and below it widened to f32 for the Context's library
// (bf16_matmul_kernel names the path). A bf16 product is computed exactly
// and summed in f32, so a bf16 matmul is the f32 matmul of the bf16-rounded inputs up to the
// order of the sums (mixed precision as PyTorch's autocast, with an f32 output). dbias sums a
// bf16 dy in f32. Absent dx, dw or dbias are skipped. Parameter gradients (dw, dbias)
// accumulate, so gradient accumulation needs no extra buffer; dx is overwritten unless
// accumulate_dx is set.
#ifndef KILN_OPS_MATMUL_H_
#define KILN_OPS_MATMUL_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

// A bf16 weight w (N, K) laid out for the matrix units: for each call the forward (x @ w^T) and
// the input gradient (dy @ w) make, that call's op(w) in the layout it reads: oneDNN's blocked
// layout at AVX-512 (2 bytes a weight per role), or op(w) widened to f32 below it (4 bytes a
// weight per role). Without it each call lays out (or widens) w itself, a pass over w for every
// block of 128 rows of x; with it, once per pack_bf16_weights. It is a copy: the caller packs again
// after w changes (a matmul cannot tell a stale copy; it checks the copy was made from this w's
// memory and shape). The results may differ from the unpacked matmul's in the order of the sums
// (oneDNN may block the reduction differently), never with the thread count.
class PackedWeight {
 public:
  PackedWeight();
  ~PackedWeight();
  PackedWeight(PackedWeight&&) noexcept;
  PackedWeight& operator=(PackedWeight&&) noexcept;

  bool empty() const;    // never packed, or its last pack failed
  size_t bytes() const;  // the memory it holds

  struct Impl;  // matmul.cc: the pieces and the w they were packed from
  const Impl* impl() const { return impl_.get(); }

 private:
  friend Status pack_bf16_weights(std::span<const TensorView> w, std::span<PackedWeight> out,
                                  const Context& ctx);
  std::unique_ptr<Impl> impl_;
};

// Packs each bf16 w[i] (N, K, unit inner stride) into out[i] (the same count), the pieces of
// all of them split over ctx's pool; out[i] keeps its memory when it already holds as much (so a
// training loop's packs allocate Kiln memory only on the first step; libdnnl may allocate
// inside a call). The pieces are laid out for ctx's path (bf16_matmul_kernel(ctx.isa)): a matmul
// of the other path reads w instead. kInvalidArgument naming a w[i]
// that is not a bf16 matrix; kUnavailable, naming the weight, when its memory cannot be had. A
// failed call leaves every out[i] empty (a matmul refuses it) until a call succeeds.
Status pack_bf16_weights(std::span<const TensorView> w, std::span<PackedWeight> out,
                         const Context& ctx);

struct MatmulParams {
  TensorView x;     // (M, K)
  TensorView w;     // (N, K)
  TensorView bias;  // (N) or absent
  TensorView y;     // (M, N)
  // pack_bf16_weights of w, or null: read in place of w by the bf16 calls.
  const PackedWeight* w_packed = nullptr;
};
Status matmul_forward(const MatmulParams& p, const Context& ctx);

struct MatmulBackwardParams {
  TensorView dy;     // (M, N)
  TensorView x;      // (M, K)
  TensorView w;      // (N, K)
  TensorView dx;     // (M, K) or absent
  TensorView dw;     // (N, K) or absent; accumulated
  TensorView dbias;  // (N) or absent; accumulated
  bool accumulate_dx = false;
  // pack_bf16_weights of w, or null: read in place of w by dx's bf16 calls.
  const PackedWeight* w_packed = nullptr;
};
Status matmul_backward(const MatmulBackwardParams& p, const Context& ctx);

// What matmuls with bf16 inputs run with a Context of `isa`: oneDNN's kernel on AVX-512
// ("brg:avx512_core_amx_bf16", oneDNN's name), or "widened to f32" (the operands widened to f32
// for the Context's f32 GEMM library: AVX2 and scalar, which have no bf16 arithmetic, and
// AVX-512 where oneDNN has no bf16 matmul). Both give the f32 sums of the exact bf16 products.
std::string bf16_matmul_kernel(CpuIsa isa);
inline constexpr std::string_view kBf16WidenedKernel = "widened to f32";
// Why an AVX-512 Context's bf16 matmuls are widened on this CPU, or "" when they are not.
std::string bf16_matmul_widened_reason();

}  // namespace kiln::ops

#endif  // KILN_OPS_MATMUL_H_
