// See include/kiln/ops/matmul.h.
//
// Every GEMM is split over the Context's pool, each task calling a GEMM library single-threaded
// on a block of output rows (or columns, when there are too few rows): one set of compute
// threads per process. f32 inputs go to the Context's library (OpenBLAS or oneDNN,
// kiln/ops/gemm_library.h) in one block per thread, each element of the output computed by one
// call with the whole reduction dimension; bf16 inputs to bgemm_single_threaded (gemm_bf16.h:
// oneDNN's bf16 matmul at AVX-512, widened to f32 below it) in fixed blocks of kBf16Block, since
// oneDNN's order of sums depends on the block's shape, and in
// fixed spans of kBf16Span (a reduction longer than that, with neither operand transposed,
// accumulated span by span in C). bf16 results do not depend on the thread count; f32 results are
// fixed for a thread count and may differ in the last bits across thread counts where the
// library's kernel orders a call's last rows otherwise (docs/ops.md, Threads).
// A bf16 weight may come packed (PackedWeight): each call's piece of op(B) already in the layout
// the call reads (oneDNN's blocked one, or widened to f32), which it would otherwise build inside
// every call.
#include <kiln/ops/matmul.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ops/cpu/kernels_linear.h"
#include "ops/dispatch.h"
#include "ops/gemm_bf16.h"
#include "ops/gemm_call.h"
#include "ops/parallel.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// Fewer rows than this per task and a split costs more than it saves.
constexpr int64_t kMinRowsPerTask = 32;
// bf16 GEMMs are cut into blocks of this many rows (or columns) whatever the thread count:
// oneDNN's bf16 kernels order the sums over a long reduction by the block's shape, so blocks
// that depended on the thread count would make the result depend on it.
constexpr int64_t kBf16Block = 128;
static_assert(kBf16Block == PackedB::kPackedRows, "packed weights are laid out for these blocks");
// A bf16 GEMM's calls have n at most this, and k too when neither operand is transposed
// (run_bf16_block says why).
constexpr int64_t kBf16Span = 3072;

// The op(B) pieces of one by-rows bf16 GEMM's calls (run_bf16_block's grid: spans of n, and of
// k when the reduction is split), each packed (pack_b): piece (ki, ci) is rows
// [ki k_span, +k_span) and columns [ci n_span, +n_span) of op(B).
struct PackedPieces {
  int64_t k_span = 0, n_span = 0, k_count = 0, n_count = 0;
  std::vector<PackedB> pieces;  // k_count x n_count, row-major
};

}  // namespace

struct PackedWeight::Impl {
  // The w packed: its memory (null until a pack has finished: a failed one leaves none), shape
  // (N, K) and row stride.
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  PackedPieces forward;     // op(B) = w^T (K x N)
  PackedPieces input_grad;  // op(B) = w (N x K)
  // Every piece's memory, one allocation: the pieces one after another at 64-byte offsets.
  std::unique_ptr<char, void (*)(void*)> arena{nullptr, std::free};
  size_t arena_bytes = 0;
};

namespace {

// One row-major GEMM: C (m x n) = op(A) @ op(B) + beta * C, where op(A) is m x k (A stored
// k x m when trans_a) and op(B) is k x n (B stored n x k when trans_b). A and B are `in` (f32
// through the Context's library, bf16 through oneDNN's matmul), C is f32. `packed`: op(B)'s
// pieces for the bf16 calls when run by rows, or null.
struct Gemm {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  DType in = DType::kF32;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  float beta = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  GemmLibrary library = GemmLibrary::kOpenBlas;
  const PackedPieces* packed = nullptr;
};

void run_block(const Gemm& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 <= m0 || n1 <= n0) return;
  const int64_t a_offset = g.trans_a ? m0 : m0 * g.lda;
  const int64_t b_offset = g.trans_b ? n0 * g.ldb : n0;
  float* c = g.c + m0 * g.ldc + n0;
  sgemm_single_threaded(g.library, g.trans_a, g.trans_b, m1 - m0, n1 - n0, g.k,
                        static_cast<const float*>(g.a) + a_offset, g.lda,
                        static_cast<const float*>(g.b) + b_offset, g.ldb, g.beta, c, g.ldc);
}

// Whether a bf16 GEMM's reduction is split into spans (run_bf16_block): only where measured,
// with neither operand transposed (the head's input gradient).
bool bf16_splits_reduction(const Gemm& g) {
  return !g.trans_a && !g.trans_b && g.k > kBf16Span;
}

// The spans of op(B) the calls of a by-rows bf16 GEMM read (run_bf16_block): one piece of k
// unless the reduction is split, one of n unless n is wider than kBf16Span.
PackedPieces call_grid(const Gemm& g) {
  PackedPieces grid;
  grid.k_span = bf16_splits_reduction(g) ? kBf16Span : g.k;
  grid.n_span = g.n <= kBf16Span ? g.n : kBf16Span;
  grid.k_count = (g.k + grid.k_span - 1) / grid.k_span;
  grid.n_count = (g.n + grid.n_span - 1) / grid.n_span;
  return grid;
}

// A task's block of a bf16 GEMM, C[m0, m1) x [n0, n1) = op(A) rows @ op(B) [+ bias] + beta C,
// in single-threaded oneDNN calls whose n is at most kBf16Span, and k too when
// bf16_splits_reduction. `a` points at the block's first row of op(A) (lda apart; k x rows when
// trans_a); `scratch` at the task's kBf16Block x kBf16Span floats (wide blocks) and `a_span` at
// its kBf16Block x kBf16Span bf16 (split reductions: a span of A's rows copied dense, since
// oneDNN runs its AMX kernel only on dense operands).
//
// Past that span, oneDNN's AMX kernel slowed down here (Intel Xeon family 6 model 167, two
// threads; `kiln ops-bench --op matmul --dtype bf16 --shape M=1024,N=50304,K=768 --pass fwdbwd`,
// GPT-2's tied head): writing 128 rows of 50,304 f32 logits straight into C ran at 800 GFLOP/s,
// the same rows computed 3,072 columns at a time into an L2-sized scratch and copied out at
// 1,050; the head's input gradient, a reduction 50,304 long against a weight oneDNN repacks on
// every call, at 650, and in reductions of 3,072 accumulated in C at 850-1,000. The blocks'
// own GEMMs (n and k up to 3,072) already ran at 1,200-1,450. The span is GPT-2's largest such
// extent (4C), fixed: the calls, and so the order of every sum, do not depend on the CPU or on
// the thread count.
void run_bf16_block(const Gemm& g, const Context& ctx, const uint16_t* a, int64_t lda, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1, const float* bias, float* scratch,
                    uint16_t* a_span) {
  const int64_t rows = m1 - m0;
  // op(B) rows [k0, k0 + kw), columns [c0, c0 + cw).
  const auto b_at = [&](int64_t k0, int64_t c0) {
    return static_cast<const uint16_t*>(g.b) + (g.trans_b ? c0 * g.ldb + k0 : k0 * g.ldb + c0);
  };
  const bool split = bf16_splits_reduction(g);
  const int64_t k_span = split ? kBf16Span : g.k;
  // c (ldc) = the columns [c0, c0 + cw) of the product, + beta * c, + the bias on them.
  const auto columns = [&](int64_t c0, int64_t cw, float beta, float* c, int64_t ldc) {
    for (int64_t k0 = 0; k0 < g.k; k0 += k_span) {
      const int64_t kw = std::min(g.k, k0 + k_span) - k0;
      const uint16_t* ak = g.trans_a ? a + k0 * lda : a + k0;
      int64_t ldak = lda;
      if (split) {  // neither operand transposed: A's span is rows x kw, lda apart
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(a_span + r * kw, ak + r * lda, static_cast<size_t>(kw) * sizeof(uint16_t));
        ak = a_span, ldak = kw;
      }
      const PackedB* piece =
          g.packed != nullptr
              ? &g.packed->pieces[static_cast<size_t>(k0 / g.packed->k_span * g.packed->n_count +
                                                      c0 / g.packed->n_span)]
              : nullptr;
      bgemm_single_threaded(ctx, g.trans_a, g.trans_b, rows, cw, kw, ak, ldak, b_at(k0, c0), g.ldb,
                            k0 == 0 && bias != nullptr ? bias + c0 : nullptr, k0 == 0 ? beta : 1.0f,
                            c, ldc, piece);
    }
  };
  float* c = g.c + m0 * g.ldc;
  if (n1 - n0 <= kBf16Span) {
    columns(n0, n1 - n0, g.beta, c + n0, g.ldc);
    return;
  }
  for (int64_t c0 = n0; c0 < n1; c0 += kBf16Span) {
    const int64_t cw = std::min(n1, c0 + kBf16Span) - c0;
    columns(c0, cw, 0.0f, scratch, cw);
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = c + r * g.ldc + c0;
      const float* src = scratch + r * cw;
      if (g.beta == 0.0f) {
        std::memcpy(dst, src, static_cast<size_t>(cw) * sizeof(float));
      } else {
        for (int64_t j = 0; j < cw; ++j)
          dst[j] += src[j];
      }
    }
  }
}

// A bf16 GEMM in blocks of kBf16Block rows of C (of columns when C has fewer rows than that and
// is wider than tall), each a task on kiln_ops' pool (run_bf16_block); with a `bias`, oneDNN
// adds its slice.
//
// oneDNN runs its AMX (brgemm) kernels only on dense operands: a block of rows of a transposed A
// (the weight gradient's dy^T, whose rows are n apart) would run its slower gemm:jit kernel. Such
// a block is first copied into a dense (k x block) scratch of the task's thread.
Status run_bf16_gemm(const Gemm& given, const float* bias, const Context& ctx) {
  const bool by_rows = given.m >= kBf16Block || given.m >= given.n;
  Gemm g = given;
  if (!by_rows) g.packed = nullptr;  // pieces are laid out for the calls of blocks of rows
  const int64_t extent = by_rows ? g.m : g.n;
  const int64_t tasks = (extent + kBf16Block - 1) / kBf16Block;
  const bool pack_a = by_rows && g.trans_a && g.lda != std::min(kBf16Block, g.m);
  const bool wide = by_rows && g.n > kBf16Span;
  // Per thread: the packed A block, the wide blocks' f32 scratch, the dense span of A (each a
  // multiple of 64 bytes: kBf16Block is).
  const int64_t pack_bytes = pack_a ? g.k * kBf16Block * int64_t{sizeof(uint16_t)} : 0;
  const int64_t scratch_bytes = wide ? kBf16Block * kBf16Span * int64_t{sizeof(float)} : 0;
  const int64_t span_bytes =
      bf16_splits_reduction(g) ? kBf16Block * kBf16Span * int64_t{sizeof(uint16_t)} : 0;
  const int64_t thread_bytes = pack_bytes + scratch_bytes + span_bytes;
  char* scratch = nullptr;
  Workspace own;
  if (thread_bytes > 0) {
    Workspace& workspace = ctx.workspace != nullptr ? *ctx.workspace : own;
    const int64_t bytes = thread_bytes * ctx.threads();
    scratch = static_cast<char*>(workspace.reserve(static_cast<size_t>(bytes)));
    if (scratch == nullptr) return scratch_unavailable("matmul (bf16 blocks)", bytes);
  }
  run_parallel(ctx, tasks, [&](int64_t task, int thread) {
    const int64_t lo = task * kBf16Block;
    const int64_t hi = std::min(extent, lo + kBf16Block);
    const int64_t m0 = by_rows ? lo : 0, m1 = by_rows ? hi : g.m;
    const int64_t n0 = by_rows ? 0 : lo, n1 = by_rows ? g.n : hi;
    char* mine = scratch + thread_bytes * thread;
    const auto* a = static_cast<const uint16_t*>(g.a) + (g.trans_a ? m0 : m0 * g.lda);
    int64_t lda = g.lda;
    if (pack_a) {
      auto* pack = reinterpret_cast<uint16_t*>(mine);
      const int64_t width = m1 - m0;
      for (int64_t r = 0; r < g.k; ++r)
        std::memcpy(pack + r * width, a + r * g.lda, static_cast<size_t>(width) * sizeof(uint16_t));
      a = pack, lda = width;
    }
    run_bf16_block(
        g, ctx, a, lda, m0, m1, n0, n1, bias,
        wide ? reinterpret_cast<float*>(mine + pack_bytes) : nullptr,
        span_bytes > 0 ? reinterpret_cast<uint16_t*>(mine + pack_bytes + scratch_bytes) : nullptr);
  });
  return Status();
}

// Splits the GEMM into one block per thread, by rows when there are enough of them, else by
// columns; block edges are multiples of 16 (whole cache lines of C). bf16 goes to run_bf16_gemm.
Status run_gemm(const Gemm& g, const Context& ctx) {
  if (g.m == 0 || g.n == 0) return Status();
  if (g.in == DType::kBF16) return run_bf16_gemm(g, nullptr, ctx);
  const int threads = ctx.threads();
  const bool by_rows = g.m >= threads * kMinRowsPerTask || g.m >= g.n;
  const int64_t extent = by_rows ? g.m : g.n;
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(threads, extent / 16));
  const int64_t chunk = (extent + tasks - 1) / tasks;
  const int64_t step = (chunk + 15) / 16 * 16;
  run_parallel(ctx, tasks, [&](int64_t task, int) {
    const int64_t lo = std::min(extent, task * step);
    const int64_t hi = std::min(extent, lo + step);
    if (by_rows) {
      run_block(g, lo, hi, 0, g.n);
    } else {
      run_block(g, 0, g.m, lo, hi);
    }
  });
  return Status();
}

// The checks shared by forward and backward: the dtype, 2-d, unit inner stride, and the sizes
// that must agree. OpenBLAS takes int dimensions and leading dimensions.
Status check_matrix(const char* op, const char* name, const TensorView& t, int64_t rows,
                    int64_t cols, DType dtype = DType::kF32) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, dtype, {rows, cols}));
  KILN_RETURN_IF_ERROR(expect_unit_inner_stride(op, name, t));
  if (t.stride[0] < t.shape[1] || t.stride[0] > INT32_MAX || t.shape[0] > INT32_MAX) {
    return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() +
                                    ") needs a row stride in [columns, 2^31)");
  }
  return Status();
}

// The inputs' dtype: x's, which w (and dy) must share; bf16 needs oneDNN's bf16 matmul here.
Result<DType> input_dtype(const char* op, const TensorView& x) {
  if (x.dtype != DType::kF32 && x.dtype != DType::kBF16) {
    return Status::invalid_argument(std::string(op) + ": x (" + x.describe() +
                                    ") must be f32 or bf16");
  }
  return x.dtype;
}

const void* data_of(const TensorView& t) {
  return t.data;
}

// The GEMMs in which a weight w (N x K, ld apart) is op(B): the forward's x @ w^T and the input
// gradient's dy @ w, with w's side filled in (matmul_forward and matmul_backward fill the rest;
// pack_bf16_weights lays out its pieces from the same, so the two cannot disagree).
Gemm weight_gemm(bool forward, const TensorView& w, DType in = DType::kBF16) {
  Gemm g;
  g.trans_b = forward;
  g.n = forward ? w.shape[0] : w.shape[1];
  g.k = forward ? w.shape[1] : w.shape[0];
  g.in = in;
  g.b = w.data;
  g.ldb = w.stride[0];
  return g;
}

// Piece `index` of a grid over g's op(B): rows [k0, k0 + kw), columns [c0, c0 + cw).
struct Piece {
  int64_t k0, c0, kw, cw;
};
Piece piece_of(const PackedPieces& grid, const Gemm& g, int64_t index) {
  Piece p;
  p.k0 = index / grid.n_count * grid.k_span;
  p.c0 = index % grid.n_count * grid.n_span;
  p.kw = std::min(g.k, p.k0 + grid.k_span) - p.k0;
  p.cw = std::min(g.n, p.c0 + grid.n_span) - p.c0;
  return p;
}

// A matmul's w_packed, when given, was made from this w (its memory, shape and row stride) for
// bf16 inputs.
Status check_packed(const char* op, const TensorView& w, DType in, const PackedWeight* packed) {
  if (packed == nullptr) return Status();
  if (in != DType::kBF16) {
    return Status::invalid_argument(std::string(op) +
                                    ": w_packed is for bf16 inputs, and these are f32");
  }
  const PackedWeight::Impl* impl = packed->impl();
  if (impl == nullptr || impl->data == nullptr) {
    return Status::invalid_argument(
        std::string(op) +
        ": w_packed is empty (pack_bf16_weights fills it; a failed one leaves it empty)");
  }
  if (impl->data != w.data || impl->rows != w.shape[0] || impl->cols != w.shape[1] ||
      impl->ld != w.stride[0]) {
    return Status::invalid_argument(
        std::string(op) + ": w_packed was packed from another weight (" +
        std::to_string(impl->rows) + " x " + std::to_string(impl->cols) + ", row stride " +
        std::to_string(impl->ld) + ") than w (" + w.describe() + ")");
  }
  return Status();
}

}  // namespace

PackedWeight::PackedWeight() = default;
PackedWeight::~PackedWeight() = default;
PackedWeight::PackedWeight(PackedWeight&&) noexcept = default;
PackedWeight& PackedWeight::operator=(PackedWeight&&) noexcept = default;

bool PackedWeight::empty() const {
  return impl_ == nullptr || impl_->data == nullptr;
}

size_t PackedWeight::bytes() const {
  return impl_ != nullptr ? impl_->arena_bytes : 0;
}

namespace {

// Lays out w's pieces for both roles in `impl` and gives them memory from its arena, grown only
// when it is too small. kUnavailable (naming `name`) when the memory cannot be had.
Status lay_out_pieces(CpuIsa isa, const TensorView& w, const char* name, PackedWeight::Impl& impl) {
  const bool empty = w.shape[0] == 0 || w.shape[1] == 0;
  const auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  size_t total = 0;
  for (const bool forward : {true, false}) {
    PackedPieces& role = forward ? impl.forward : impl.input_grad;
    std::vector<PackedB> pieces = std::move(role.pieces);
    const Gemm g = weight_gemm(forward, w);
    role = empty ? PackedPieces() : call_grid(g);
    pieces.resize(static_cast<size_t>(role.k_count * role.n_count));
    role.pieces = std::move(pieces);
    for (int64_t index = 0; index < role.k_count * role.n_count; ++index) {
      const Piece piece = piece_of(role, g, index);
      Result<size_t> bytes = layout_b(isa, g.trans_b, piece.kw, piece.cw, g.ldb,
                                      &role.pieces[static_cast<size_t>(index)]);
      if (!bytes.ok()) return bytes.status().with_context(name);
      total += aligned(*bytes);
    }
  }
  if (impl.arena == nullptr || impl.arena_bytes < total) {
    impl.arena.reset();
    impl.arena_bytes = 0;
    // On huge pages past one (advice only, which a kernel without transparent huge pages
    // declines): GPT-2's Linear weights pack into several MiB each.
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t align = total >= kHugePage ? kHugePage : 64;
    const size_t rounded = std::max<size_t>(align, (total + align - 1) / align * align);
    void* data = std::aligned_alloc(align, rounded);
    if (data == nullptr) {
      return Status::unavailable(std::string(name) + ": cannot allocate " +
                                 std::to_string(rounded) + " bytes for its packed pieces");
    }
    if (align == kHugePage) (void)::madvise(data, rounded, MADV_HUGEPAGE);
    impl.arena.reset(static_cast<char*>(data));
    impl.arena_bytes = rounded;
  }
  size_t offset = 0;
  for (PackedPieces* role : {&impl.forward, &impl.input_grad}) {
    for (PackedB& piece : role->pieces) {
      place_b(impl.arena.get() + offset, &piece);
      offset += aligned(piece.bytes());
    }
  }
  return Status();
}

}  // namespace

Status pack_bf16_weights(std::span<const TensorView> w, std::span<PackedWeight> out,
                         const Context& ctx) {
  constexpr const char* kOp = "pack_bf16_weights";
  KILN_RETURN_IF_ERROR(check_cpu_dispatch(ctx, kOp));
  if (w.size() != out.size()) {
    return Status::invalid_argument(std::string(kOp) + ": " + std::to_string(w.size()) +
                                    " weights but " + std::to_string(out.size()) + " outputs");
  }
  // Until every piece is copied no out[i] names a source: any failure leaves them all empty.
  for (PackedWeight& o : out) {
    if (o.impl_ != nullptr) o.impl_->data = nullptr;
  }
  for (size_t i = 0; i < w.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "w[%zu]", i);
    KILN_RETURN_IF_ERROR(check_matrix(kOp, name, w[i], -1, -1, DType::kBF16));
  }
  // Every piece of every weight is a task: (weight, role, piece) in that order. The pieces are
  // laid out and their memory had first, here, so that a failure is a Status and the tasks
  // only copy.
  int64_t total = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (out[i].impl_ == nullptr) out[i].impl_ = std::make_unique<PackedWeight::Impl>();
    PackedWeight::Impl& impl = *out[i].impl_;
    impl.rows = w[i].shape[0], impl.cols = w[i].shape[1], impl.ld = w[i].stride[0];
    char name[64];
    std::snprintf(name, sizeof(name), "%s w[%zu]", kOp, i);
    KILN_RETURN_IF_ERROR(lay_out_pieces(ctx.isa, w[i], name, impl));
    total += impl.forward.k_count * impl.forward.n_count +
             impl.input_grad.k_count * impl.input_grad.n_count;
  }
  run_parallel(ctx, total, [&](int64_t task, int) {
    for (size_t i = 0; i < w.size(); ++i) {
      PackedWeight::Impl& impl = *out[i].impl_;
      for (const bool forward : {true, false}) {
        PackedPieces& role = forward ? impl.forward : impl.input_grad;
        const int64_t count = role.k_count * role.n_count;
        if (task >= count) {
          task -= count;
          continue;
        }
        const Gemm g = weight_gemm(forward, w[i]);
        const Piece piece = piece_of(role, g, task);
        const auto* b = static_cast<const uint16_t*>(g.b) +
                        (g.trans_b ? piece.c0 * g.ldb + piece.k0 : piece.k0 * g.ldb + piece.c0);
        pack_b(g.trans_b, piece.kw, piece.cw, b, g.ldb, &role.pieces[static_cast<size_t>(task)]);
        return;
      }
    }
  });
  for (size_t i = 0; i < w.size(); ++i)
    out[i].impl_->data = w[i].data;
  return Status();
}

std::string bf16_matmul_kernel(CpuIsa isa) {
  return bf16_gemm_kernel(isa);
}

std::string bf16_matmul_widened_reason() {
  return bf16_gemm_widened_reason();
}

Status matmul_forward(const MatmulParams& p, const Context& ctx) {
  constexpr const char* kOp = "matmul_forward";
  KILN_RETURN_IF_ERROR(check_cpu_dispatch(ctx, kOp));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "x", p.x));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "w", p.w));
  const int64_t m = p.x.ndim == 2 ? p.x.shape[0] : -1;
  const int64_t k = p.x.ndim == 2 ? p.x.shape[1] : -1;
  const int64_t n = p.w.ndim == 2 ? p.w.shape[0] : -1;
  KILN_ASSIGN_OR_RETURN(const DType in, input_dtype(kOp, p.x));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "x", p.x, -1, -1, in));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "w", p.w, n, k, in));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "y", p.y, m, n));
  KILN_RETURN_IF_ERROR(check_packed(kOp, p.w, in, p.w_packed));
  if (p.bias.present()) {
    KILN_RETURN_IF_ERROR(expect_shape(kOp, "bias", p.bias, DType::kF32, {n}));
    KILN_RETURN_IF_ERROR(expect_contiguous(kOp, "bias", p.bias));
  }
  float* y = p.y.f32_ptr();
  const int64_t ldy = p.y.stride[0];
  if (k == 0) {  // an empty reduction: y is the bias (or zero)
    for (int64_t r = 0; r < m; ++r) {
      if (p.bias.present()) {
        std::memcpy(y + r * ldy, p.bias.f32_ptr(), n * sizeof(float));
      } else {
        std::memset(y + r * ldy, 0, n * sizeof(float));
      }
    }
    return Status();
  }
  Gemm g = weight_gemm(true, p.w, in);  // n, k and b from w
  g.library = ctx.gemm;
  g.m = m;
  g.a = data_of(p.x), g.lda = p.x.stride[0];
  g.c = y, g.ldc = ldy;
  if (p.w_packed != nullptr) g.packed = &p.w_packed->impl()->forward;
  if (p.bias.present()) {
    // y = bias, then y += x @ w^T: the bias row is copied in the same task that computes the
    // rows, while they are in cache.
    const float* bias = p.bias.f32_ptr();
    if (in == DType::kBF16) {
      if (m > 0 && n > 0) KILN_RETURN_IF_ERROR(run_bf16_gemm(g, bias, ctx));
      return Status();
    }
    g.beta = 1.0f;
    const int threads = ctx.threads();
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(threads, m / kMinRowsPerTask));
    const int64_t step = ((m + tasks - 1) / tasks + 15) / 16 * 16;
    run_parallel(ctx, tasks, [&](int64_t task, int) {
      const int64_t lo = std::min(m, task * step);
      const int64_t hi = std::min(m, lo + step);
      for (int64_t r = lo; r < hi; ++r)
        std::memcpy(y + r * ldy, bias, n * sizeof(float));
      run_block(g, lo, hi, 0, n);
    });
    return Status();
  }
  return run_gemm(g, ctx);
}

Status matmul_backward(const MatmulBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "matmul_backward";
  KILN_RETURN_IF_ERROR(check_cpu_dispatch(ctx, kOp));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "dy", p.dy));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "x", p.x));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "w", p.w));
  const int64_t m = p.x.ndim == 2 ? p.x.shape[0] : -1;
  const int64_t k = p.x.ndim == 2 ? p.x.shape[1] : -1;
  const int64_t n = p.w.ndim == 2 ? p.w.shape[0] : -1;
  KILN_ASSIGN_OR_RETURN(const DType in, input_dtype(kOp, p.x));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "x", p.x, -1, -1, in));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "w", p.w, n, k, in));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "dy", p.dy, m, n, in));
  if (p.dx.present()) KILN_RETURN_IF_ERROR(check_matrix(kOp, "dx", p.dx, m, k));
  KILN_RETURN_IF_ERROR(check_packed(kOp, p.w, in, p.w_packed));
  if (p.dw.present()) KILN_RETURN_IF_ERROR(check_matrix(kOp, "dw", p.dw, n, k));
  if (p.dbias.present()) {
    KILN_RETURN_IF_ERROR(expect_shape(kOp, "dbias", p.dbias, DType::kF32, {n}));
    KILN_RETURN_IF_ERROR(expect_contiguous(kOp, "dbias", p.dbias));
  }
  if (p.dx.present()) {                    // dx (=|+=) dy @ w: (m x n) @ (n x k)
    Gemm g = weight_gemm(false, p.w, in);  // n = k, k = n and b from w
    g.library = ctx.gemm;
    g.m = m;
    g.a = data_of(p.dy), g.lda = p.dy.stride[0];
    g.beta = p.accumulate_dx ? 1.0f : 0.0f;
    g.c = p.dx.f32_ptr(), g.ldc = p.dx.stride[0];
    if (p.w_packed != nullptr) g.packed = &p.w_packed->impl()->input_grad;
    if (n == 0 && !p.accumulate_dx) {
      for (int64_t r = 0; r < m; ++r)
        std::memset(g.c + r * g.ldc, 0, k * sizeof(float));
    } else if (n > 0) {
      KILN_RETURN_IF_ERROR(run_gemm(g, ctx));
    }
  }
  if (p.dw.present() && m > 0) {  // dw += dy^T @ x: (n x m) @ (m x k)
    Gemm g;
    g.library = ctx.gemm;
    g.trans_a = true;
    g.m = n, g.n = k, g.k = m;
    g.in = in;
    g.a = data_of(p.dy), g.lda = p.dy.stride[0];
    g.b = data_of(p.x), g.ldb = p.x.stride[0];
    g.beta = 1.0f;
    g.c = p.dw.f32_ptr(), g.ldc = p.dw.stride[0];
    KILN_RETURN_IF_ERROR(run_gemm(g, ctx));
  }
  if (p.dbias.present() && m > 0) {
    return KILN_OPS_DISPATCH(ctx, kOp, column_sums_accumulate, p.dy, p.dbias, ctx);
  }
  return Status();
}

}  // namespace kiln::ops
