// One row-major GEMM with bf16 inputs and an f32 output: the only place kiln_ops runs bf16 matrix
// products. Two paths, by the Context's ISA:
//
// - AVX-512: oneDNN's matmul primitive, which picks its kernel by the CPU at run time: AMX tiles
//   (avx512_core_amx), AVX512-BF16 dot products (avx512_core_bf16), or, on plain AVX-512, a
//   conversion to f32 inside the kernel.
// - AVX2 and scalar (and AVX-512 should oneDNN have no bf16 matmul): the operands are widened to
//   f32 in the calling thread's scratch and multiplied by the Context's f32 GEMM library
//   (kiln/ops/gemm_library.h). oneDNN 2.6 has no bf16 matmul without AVX-512, and these CPUs
//   have no bf16 arithmetic either: this path makes a bf16 run possible on them (the same
//   values as a bf16 kernel, not its speed).
//
// The products of two bf16 values are exact in f32 and every path accumulates in f32, so the
// paths differ only in the order of the sums.
//
//   C (m x n) = op(A) @ op(B) [+ bias] + beta * C, A, B bf16, C and bias (n) f32; op(A) m x k
//   (stored k x m when trans_a), op(B) k x n (stored n x k when trans_b); lda, ldb, ldc are row
//   strides in elements.
//
// Called, like the f32 GEMMs, single-threaded inside kiln_ops' own pool, one block of rows per
// task (matmul.cc). Handing oneDNN the whole GEMM on its own OpenMP threads instead ran each GEMM
// faster but the training step slower: libgomp's workers spin after each GEMM on the cores
// kiln_ops' pool needs for the next op (GPT-2 small, 1,024 tokens a step, two threads of an
// Intel Xeon family 6 model 167: 717 tokens/s that way, 852 with blocks of 128 rows).
//
// A oneDNN primitive is built per shape, strides, bias and beta, and kept per calling thread (a
// bounded cache: a training step uses a few dozen shapes), so a loop of GEMMs builds nothing
// after its first step. The widened path's scratch is per calling thread too: f32 copies of a
// 512-long span of the reduction at a time ((m + n) x 512 floats), grown to the largest call's
// and kept.
#ifndef KILN_OPS_GEMM_BF16_H_
#define KILN_OPS_GEMM_BF16_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/matmul.h>

namespace kiln::ops {

// What the bf16 GEMMs of a Context with `isa` run here: oneDNN's name for its kernel
// ("brg:avx512_core_amx_bf16"), or kBf16WidenedKernel. Probed once per process.
std::string bf16_gemm_kernel(CpuIsa isa);
// Why an AVX-512 Context's bf16 GEMMs are widened here ("" when they run on oneDNN): oneDNN's
// refusal of this CPU.
std::string bf16_gemm_widened_reason();

// The distinct kernels (oneDNN's names) of the bf16 GEMMs the calling thread has run on oneDNN and
// still holds primitives for: what tests check ran on the matrix units ("brg:..."), not a
// fallback.
std::vector<std::string> bf16_gemm_kernels_run_here();

// op(B) (k x n) of one call shape in the layout a GEMM of `isa` reads: oneDNN's blocked layout
// for calls of kPackedRows rows of A, or, on the widened path, op(B) widened to f32 (k x n, row
// major). Given a plain B, either is made from it inside every call (a pass over B for each block
// of rows); a weight packed once a step is read as it is. It points into memory its owner holds
// (matmul.cc's PackedWeight: one allocation for all of a weight's pieces).
class PackedB {
 public:
  // The rows of op(A) of the calls whose layout pack_b asks oneDNN for: matmul.cc's block.
  static constexpr int64_t kPackedRows = 128;

  PackedB();
  ~PackedB();
  PackedB(PackedB&&) noexcept;
  PackedB& operator=(PackedB&&) noexcept;

  // The bytes its layout takes (0 before layout_b).
  size_t bytes() const;

 private:
  friend Result<size_t> layout_b(CpuIsa, bool, int64_t, int64_t, int64_t, PackedB*);
  friend void place_b(char*, PackedB*);
  friend void pack_b(bool, int64_t, int64_t, const uint16_t*, int64_t, PackedB*);
  friend void bgemm_single_threaded(const Context&, bool, bool, int64_t, int64_t, int64_t,
                                    const uint16_t*, int64_t, const uint16_t*, int64_t,
                                    const float*, float, float*, int64_t, const PackedB*);
  struct Layout;  // oneDNN's memory descriptor, or the widened shape
  std::unique_ptr<Layout> layout_;
  char* data_ = nullptr;  // its owner's memory, bytes() of it; null until place_b
  size_t bytes_ = 0;
};

// Gives *out the layout that GEMMs of `isa` read of op(B) (k x n; stored n x k, ldb apart, when
// trans_b) and returns the bytes it takes; *out points at no memory until place_b. kUnavailable
// when the memory to describe the layout cannot be had. REQUIRES: as bgemm_single_threaded.
Result<size_t> layout_b(CpuIsa isa, bool trans_b, int64_t k, int64_t n, int64_t ldb, PackedB* out);

// Points *out at `data`: 64-byte aligned, at least out->bytes(), held by the caller as long as
// *out is read.
void place_b(char* data, PackedB* out);

// Lays out op(B), b's values, into *out's memory, single-threaded, allocating nothing.
// REQUIRES: layout_b(isa, trans_b, k, n, ldb, out) succeeded, then place_b.
void pack_b(bool trans_b, int64_t k, int64_t n, const uint16_t* b, int64_t ldb, PackedB* out);

// The path and, when widened, the f32 library are ctx's (ctx.isa, ctx.gemm); ctx's pool is not
// used. REQUIRES: beta is 0 or 1; every dimension positive and fitting an int; strides valid for
// the shapes (the callers check). A refusal by oneDNN, or memory for the widened operands that
// cannot be had, is fatal (a pool task cannot report it), checked.
//
// With `packed_b` (pack_b of this call's op(B): the same trans_b, k, n and values as b), B is
// read from it when the call reads that layout (checked on every call: a pack of another path
// is not read, and oneDNN picks its layout by the call's shape too, so a block of fewer rows may
// want another) and from b otherwise; the two differ at most in the order of the sums over k.
void bgemm_single_threaded(const Context& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                           int64_t ldb, const float* bias, float beta, float* c, int64_t ldc,
                           const PackedB* packed_b = nullptr);

// How many of the calling thread's calls with a packed_b read it, and how many read b instead:
// what tests check of the layouts' agreement.
struct PackedBUse {
  int64_t read_packed = 0;
  int64_t read_plain = 0;
};
PackedBUse packed_b_use_here();

}  // namespace kiln::ops

#endif  // KILN_OPS_GEMM_BF16_H_
