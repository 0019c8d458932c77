// The reduce dispatcher: checks a ReduceArgs, folds kAvg-with-divide_by-1 into kSum and calls the
// kernel of the chosen ISA. Also copy2 and the choice of ISA (KILN_COMM_ISA, read in comm_env.cc).
//
// Compiled with the project's baseline flags (no -mavx*), so it runs on any x86-64 and is the
// only code that decides whether an AVX2 or AVX-512 kernel may run. The CPU is probed once per
// process (function-local statics, computed once and never changed).
#include "comm/reduce/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <emmintrin.h>
#include <initializer_list>
#include <string>
#include <utility>

#include <kiln/base/check.h>

#include "comm/comm_env.h"
#include "comm/reduce/reduce_kernels_internal.h"

namespace kiln::comm {
namespace {

using reduce_internal::KernelArgs;
using reduce_internal::Kind;

// Chunk of the two-destination copy. Each chunk of src is copied to dst and then to dst2 while it
// is still in L1: src, dst and dst2 lines of an 8 KiB chunk (24 KiB) fit the 32 KiB L1d that
// every x86-64 core since 2008 has, so src is read from memory once. Big enough that the two
// memcpy calls per chunk cost little. kiln_reduce_bench: 1.3x two whole-buffer memcpy calls at
// 64 KiB, 1.5x at 64 MiB (2-core Zen 4 VM).
constexpr size_t kCopyChunkBytes = 8 * 1024;

CpuIsa cpu_best_isa() {
  static const CpuIsa best = detect_cpu_features().best_isa();
  return best;
}

bool isa_at_most(CpuIsa isa, CpuIsa limit) {
  return static_cast<int>(isa) <= static_cast<int>(limit);
}

// True iff [p, p + p_bytes) and [q, q + q_bytes) share a byte but do not start at the same address
// (exact aliasing is allowed; anything else would make the result depend on the loop order).
bool partially_overlap(const void* p, size_t p_bytes, const void* q, size_t q_bytes) {
  if (p == nullptr || q == nullptr || p == q) return false;
  const auto ps = reinterpret_cast<uintptr_t>(p);
  const auto qs = reinterpret_cast<uintptr_t>(q);
  return ps < qs + q_bytes && qs < ps + p_bytes;
}

Kind kind_of(const ReduceArgs& args) {
  switch (args.op) {
    case ReduceOp::kSum: return Kind::kSum;
    case ReduceOp::kMin: return Kind::kMin;
    case ReduceOp::kMax: return Kind::kMax;
    case ReduceOp::kAvg: return args.divide_by > 1 ? Kind::kAvg : Kind::kSum;
  }
  KILN_CHECK(false) << "reduce: invalid ReduceOp " << static_cast<int>(args.op);
  return Kind::kSum;
}

// Checks every REQUIRES of reduce() that a kernel relies on. Cheap: a few compares per call.
KernelArgs kernel_args(const ReduceArgs& args) {
  KILN_CHECK(static_cast<int>(args.dtype) < kDataTypeCount)
      << "reduce: invalid DataType " << static_cast<int>(args.dtype);
  KILN_CHECK(args.divide_by >= 1) << "reduce: divide_by must be >= 1, got " << args.divide_by;
  const size_t elem_bytes = dtype_size(args.dtype);
  KILN_CHECK(args.count <= SIZE_MAX / elem_bytes)
      << "reduce: count " << args.count << " of " << dtype_name(args.dtype)
      << " overflows the address space";
  const size_t bytes = args.count * elem_bytes;
  if (args.count > 0) {
    KILN_CHECK(args.dst != nullptr && args.a != nullptr && args.b != nullptr)
        << "reduce: null dst, a or b with count " << args.count;
  }
  const struct {
    const void* p;
    const char* name;
  } ranges[] = {{args.a, "a"}, {args.b, "b"}, {args.dst, "dst"}, {args.dst2, "dst2"}};
  for (const void* written :
       {static_cast<const void*>(args.dst), static_cast<const void*>(args.dst2)}) {
    for (const auto& r : ranges) {
      KILN_CHECK(!partially_overlap(written, bytes, r.p, bytes))
          << "reduce: " << (written == args.dst ? "dst" : "dst2") << " partially overlaps "
          << r.name << " (" << bytes << " bytes each)";
    }
  }
  KernelArgs k;
  k.dst = static_cast<unsigned char*>(args.dst);
  k.dst2 = static_cast<unsigned char*>(args.dst2);
  k.a = static_cast<const unsigned char*>(args.a);
  k.b = static_cast<const unsigned char*>(args.b);
  k.count = args.count;
  k.dtype = args.dtype;
  k.kind = kind_of(args);
  k.divide_by = k.kind == Kind::kAvg ? args.divide_by : 1;
  // A destination this large streams whole (dst2 too); a smaller one only dst, and only when
  // the caller asked.
  k.stream_dst2 = bytes >= reduce_internal::kStreamBytesMin;
  k.stream = k.stream_dst2 || args.stream_dst;
  return k;
}

}  // namespace

namespace reduce_internal {

Result<CpuIsa> choose_reduce_isa(CpuIsa best, const char* request) {
  if (request == nullptr || request[0] == '\0') return best;
  std::string accepted;
  for (int i = 0; i <= static_cast<int>(best); ++i)
    accepted += std::string(i == 0 ? "" : ", ") + std::string(cpu_isa_name(static_cast<CpuIsa>(i)));
  const Result<CpuIsa> asked = parse_cpu_isa(request);
  if (!asked.ok()) {
    return Status::invalid_argument("KILN_COMM_ISA='" + std::string(request) +
                                    "' is not an ISA: accepted are scalar, avx2 and avx512 (this "
                                    "CPU runs " +
                                    accepted + "), or unset for the best");
  }
  if (!isa_at_most(*asked, best)) {
    return Status::not_supported(
        "KILN_COMM_ISA=" + std::string(request) + " asks for " + std::string(cpu_isa_name(*asked)) +
        " but this CPU supports at most " + std::string(cpu_isa_name(best)) +
        " (accepted here: " + accepted + ")");
  }
  return *asked;
}

}  // namespace reduce_internal

CpuIsa reduce_isa() {
  // Parsed once (comm_env.h); the environment is not expected to change under a running job.
  // Communicator::create returns a bad KILN_COMM_ISA as an error, so this check fails only for
  // reduce() called outside a communicator.
  static const CpuIsa isa = [] {
    const Result<CommEnv> env = parse_comm_env(process_env(), cpu_best_isa());
    KILN_CHECK(env.ok()) << env.status().message();
    return env->reduce_isa.value_or(cpu_best_isa());
  }();
  return isa;
}

void reduce(const ReduceArgs& args) {
  reduce_with_isa(args, reduce_isa());
}

void reduce_with_isa(const ReduceArgs& args, CpuIsa isa) {
  KILN_CHECK(isa_at_most(isa, cpu_best_isa()))
      << "reduce: ISA " << cpu_isa_name(isa) << " requested but this CPU supports at most "
      << cpu_isa_name(cpu_best_isa());
  const KernelArgs k = kernel_args(args);
  if (k.count == 0) return;
  switch (isa) {
    case CpuIsa::kScalar: return reduce_internal::reduce_kernel_scalar(k);
    case CpuIsa::kAvx2: return reduce_internal::reduce_kernel_avx2(k);
    case CpuIsa::kAvx512: return reduce_internal::reduce_kernel_avx512(k);
  }
  KILN_CHECK(false) << "reduce: invalid CpuIsa " << static_cast<int>(isa);
}

void copy2(void* dst, void* dst2, const void* src, size_t bytes) {
  if (bytes == 0) return;
  KILN_CHECK(dst != nullptr && src != nullptr)
      << "copy2: null dst or src with " << bytes << " bytes";
  KILN_CHECK(!partially_overlap(dst, bytes, src, bytes)) << "copy2: dst partially overlaps src";
  KILN_CHECK(!partially_overlap(dst2, bytes, src, bytes)) << "copy2: dst2 partially overlaps src";
  KILN_CHECK(!partially_overlap(dst, bytes, dst2, bytes)) << "copy2: dst partially overlaps dst2";
  // The destinations that need a copy: one equal to src, or dst2 equal to dst, needs none, so
  // memcpy never sees overlapping ranges.
  auto* first = dst == src ? nullptr : static_cast<unsigned char*>(dst);
  auto* second = dst2 == src || dst2 == dst ? nullptr : static_cast<unsigned char*>(dst2);
  if (first == nullptr) std::swap(first, second);
  if (first == nullptr) return;
  const auto* s = static_cast<const unsigned char*>(src);
  if (second == nullptr) {
    std::memcpy(first, s, bytes);
    return;
  }
  for (size_t off = 0; off < bytes; off += kCopyChunkBytes) {
    const size_t n = bytes - off < kCopyChunkBytes ? bytes - off : kCopyChunkBytes;
    std::memcpy(first + off, s + off, n);
    std::memcpy(second + off, s + off, n);
  }
}

void copy2_stream_dst(void* dst, void* dst2, const void* src, size_t bytes) {
  if (bytes == 0) return;
  KILN_CHECK(dst != nullptr && src != nullptr)
      << "copy2_stream_dst: null dst or src with " << bytes << " bytes";
  KILN_CHECK(!partially_overlap(dst, bytes, src, bytes))
      << "copy2_stream_dst: dst partially overlaps src";
  KILN_CHECK(!partially_overlap(dst2, bytes, src, bytes))
      << "copy2_stream_dst: dst2 partially overlaps src";
  KILN_CHECK(!partially_overlap(dst, bytes, dst2, bytes))
      << "copy2_stream_dst: dst partially overlaps dst2";
  if (dst2 != nullptr && dst2 != src && dst2 != dst) std::memcpy(dst2, src, bytes);
  if (dst == src) return;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // Plain bytes up to dst's first 16-byte boundary, streamed 16-byte vectors (SSE2: every
  // x86-64 has it), plain bytes for the tail, then an SFENCE that orders the streamed stores
  // before any later store of this thread (a flag telling a peer the data is there).
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  size_t off = head;
  for (; bytes - off >= 16; off += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + off),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + off)));
  }
  std::memcpy(d + off, s + off, bytes - off);
  _mm_sfence();
}

}  // namespace kiln::comm
