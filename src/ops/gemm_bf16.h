// One row-major GEMM with bf16 inputs and an f32 output, through oneDNN's matmul primitive: the
// only place kiln_ops runs bf16 matrix products. oneDNN picks the kernel by the CPU's ISA at run
// time: AMX
// tiles (avx512_core_amx), AVX512-BF16 dot products (avx512_core_bf16), or, on plain AVX-512, a
// conversion to f32 inside the kernel; the products of two bf16 values are exact in f32 and every
// path accumulates in f32, so the paths differ only in the order of the sums.
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
// A primitive is built per shape, strides, bias and beta, and kept per calling thread (a bounded
// cache: a training step uses a few dozen shapes), so a loop of GEMMs builds nothing after its
// first step.
#ifndef KILN_OPS_GEMM_BF16_H_
#define KILN_OPS_GEMM_BF16_H_

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/base/status.h>

namespace kiln::ops {

// OK iff oneDNN has a bf16 matmul for this CPU (it needs AVX-512); else kNotSupported naming the
// CPU's best oneDNN ISA. Probed once per process.
Status bf16_gemm_available();

// oneDNN's name for the kernel a bf16 GEMM runs here ("brg:avx512_core_amx_bf16"), or "" when
// bf16_gemm_available() is not OK.
std::string bf16_gemm_kernel();

// The distinct kernels (oneDNN's names) of the bf16 GEMMs the calling thread has run and still
// holds primitives for: what tests check ran on the matrix units ("brg:..."), not a fallback.
std::vector<std::string> bf16_gemm_kernels_run_here();

// REQUIRES: bf16_gemm_available() is OK; beta is 0 or 1; every dimension positive; strides
// valid for the shapes (the callers check). A refusal by oneDNN is a bug, checked.
void bgemm_single_threaded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                           const float* bias, float beta, float* c, int64_t ldc);

}  // namespace kiln::ops

#endif  // KILN_OPS_GEMM_BF16_H_
