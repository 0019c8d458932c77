// See gemm_bf16.h.
#include "ops/gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <list>
#include <memory>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kiln/base/check.h>

#include "ops/gemm_call.h"

namespace kiln::ops {
namespace {

using dnnl::memory;

// Shapes a thread keeps primitives for. GPT-2's step has 9 GEMM shapes per direction (a handful
// more at the edges of the blocks), and causal bf16 attention 3 per block of 64 queries (S and
// dP share one, P V and dQ another, dK and dV the third): 48 at T = 1,024, 192 at T = 4,096.
// Past the bound the least recently used is dropped (and rebuilt from oneDNN's own primitive
// cache when needed again: correct, slower).
constexpr size_t kPrimitivesPerThread = 256;

// The process's CPU engine: created once, never changed (oneDNN engines are thread-safe).
const dnnl::engine& cpu_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// `packed`: B in the layout oneDNN picks for the shape (format any), not as b's strides.
struct Key {
  bool trans_a, trans_b, bias, accumulate, packed;
  int64_t m, n, k, lda, ldb, ldc;
  bool operator==(const Key& o) const {
    return std::tie(trans_a, trans_b, bias, accumulate, packed, m, n, k, lda, ldb, ldc) ==
           std::tie(o.trans_a, o.trans_b, o.bias, o.accumulate, o.packed, o.m, o.n, o.k, o.lda,
                    o.ldb, o.ldc);
  }
};
struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = (key.trans_a ? 1u : 0u) | (key.trans_b ? 2u : 0u) | (key.accumulate ? 4u : 0u) |
               (key.bias ? 8u : 0u) | (key.packed ? 16u : 0u);
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

// A primitive with its memory objects, made once: a call only points them at its buffers
// (set_data_handle) and runs it through the C API with a fixed argument array, so a call
// allocates nothing in Kiln's code (oneDNN may inside).
struct Prepared {
  memory::desc a, b, bias, c;
  memory ma, mb, mbias, mc;
  dnnl::matmul matmul;
  std::string kernel;  // oneDNN's name of the implementation it chose
};

// The descriptors of one GEMM: op(A) (m, k) and op(B) (k, n) as strided views of the row-major
// storage, C (m, n) with row stride ldc.
Prepared prepare(const Key& key) {
  const memory::dims a_strides = key.trans_a ? memory::dims{1, key.lda} : memory::dims{key.lda, 1};
  const memory::dims b_strides = key.trans_b ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1};
  Prepared p;
  p.a = memory::desc({key.m, key.k}, memory::data_type::bf16, a_strides);
  p.b = key.packed ? memory::desc({key.k, key.n}, memory::data_type::bf16, memory::format_tag::any)
                   : memory::desc({key.k, key.n}, memory::data_type::bf16, b_strides);
  p.c = memory::desc({key.m, key.n}, memory::data_type::f32, memory::dims{key.ldc, 1});
  if (key.bias) p.bias = memory::desc({1, key.n}, memory::data_type::f32, memory::dims{key.n, 1});
  dnnl::primitive_attr attr;
  if (key.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(
      key.bias ? dnnl::matmul::desc(p.a, p.b, p.bias, p.c) : dnnl::matmul::desc(p.a, p.b, p.c),
      attr, cpu_engine());
  p.matmul = dnnl::matmul(pd);
  p.kernel = pd.impl_info_str();
  if (key.packed) p.b = pd.weights_desc();
  p.ma = memory(p.a, cpu_engine(), DNNL_MEMORY_NONE);
  p.mb = memory(p.b, cpu_engine(), DNNL_MEMORY_NONE);
  p.mc = memory(p.c, cpu_engine(), DNNL_MEMORY_NONE);
  if (key.bias) p.mbias = memory(p.bias, cpu_engine(), DNNL_MEMORY_NONE);
  return p;
}

// A thread's primitives, most recently used first.
class PrimitiveCache {
 public:
  Prepared& get(const Key& key) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      entries_.splice(entries_.begin(), entries_, found->second);
      return entries_.front().second;
    }
    if (entries_.size() >= kPrimitivesPerThread) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    entries_.emplace_front(key, prepare(key));
    index_[key] = entries_.begin();
    return entries_.front().second;
  }

 private:
  std::list<std::pair<Key, Prepared>> entries_;

 public:
  // The distinct kernels of the primitives held.
  std::vector<std::string> kernels() const {
    std::vector<std::string> out;
    for (const auto& [key, p] : entries_) {
      if (std::find(out.begin(), out.end(), p.kernel) == out.end()) out.push_back(p.kernel);
    }
    return out;
  }

 private:
  std::unordered_map<Key, std::list<std::pair<Key, Prepared>>::iterator, KeyHash> index_;
};

struct Probe {
  std::string kernel;         // oneDNN's, or kBf16WidenedKernel
  std::string widened_since;  // oneDNN's refusal of this CPU; "" when it has a bf16 matmul
};

Probe probe() {
  Probe p;
  try {
    // A block of GPT-2 small's linear (128 rows, 768 x 768): oneDNN picks its kernel by shape
    // too, and a tiny probe would name one the matmuls never run.
    const memory::desc a({128, 768}, memory::data_type::bf16, memory::dims{768, 1});
    const memory::desc b({768, 768}, memory::data_type::bf16, memory::dims{1, 768});
    const memory::desc c({128, 768}, memory::data_type::f32, memory::dims{768, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), cpu_engine());
    p.kernel = pd.impl_info_str();
  } catch (const dnnl::error& e) {
    p.kernel = std::string(kBf16WidenedKernel);
    p.widened_since =
        std::string("oneDNN has no bf16 matmul for this CPU (it needs AVX-512): ") + e.what();
  }
  return p;
}

const Probe& process_probe() {
  static const Probe* p = new Probe(probe());  // once per process, never changed
  return *p;
}

// The calling thread's primitives and stream (thread_local: oneDNN's primitives run on the
// thread that made them when built without concurrent execution, as Debian's is).
PrimitiveCache& thread_cache() {
  thread_local PrimitiveCache cache;
  return cache;
}

// The calling thread's count of calls with a PackedB (PackedBUse).
PackedBUse& thread_packed_use() {
  thread_local PackedBUse use;
  return use;
}

// Whether GEMMs of a Context with `isa` widen their operands (gemm_bf16.h).
bool widened(CpuIsa isa) {
  return isa != CpuIsa::kAvx512 || !process_probe().widened_since.empty();
}

// bf16 -> f32, exactly: the bf16 bits are the high half of the f32's.
inline float widen(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Widens the `rows` x `cols` matrix at `src` (rows ld apart) into `dst` (dense, cols apart).
void widen_matrix(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* in = src + r * ld;
    float* out = dst + r * cols;
    for (int64_t j = 0; j < cols; ++j)
      out[j] = widen(in[j]);
  }
}

// The reduction a widened call widens and multiplies at a time. Its f32 copies of A and B hold
// (m + n) x this many floats whatever the reduction's length (a weight gradient's is the step's
// tokens), so they are bounded by the callers' m and n: matmul.cc's at most 128 rows (or columns)
// by at most kBf16Span (3,072) columns, attention's 64 queries by T keys or T keys by D. Long
// enough that the f32 library runs at its speed (its own blocking of the reduction is shorter).
constexpr int64_t kWidenedSpan = 512;

// The calling thread's f32 copies of a widened call's A and B (a kWidenedSpan of the reduction
// each), grown to the largest call's and kept, so a loop of GEMMs allocates nothing after its
// first step.
struct WidenedScratch {
  std::vector<float> a, b;
};

WidenedScratch& widened_scratch() {
  thread_local WidenedScratch scratch;
  return scratch;
}

float* grown(std::vector<float>* v, int64_t count) {
  if (v->size() < static_cast<size_t>(count)) v->resize(static_cast<size_t>(count));
  return v->data();
}

// What pack_b needs for one shape of op(B): the layout a kPackedRows-row call reads, and the
// reorder from b's strides into it.
struct PackKey {
  bool trans_b;
  int64_t k, n, ldb;
  bool operator==(const PackKey& o) const {
    return std::tie(trans_b, k, n, ldb) == std::tie(o.trans_b, o.k, o.n, o.ldb);
  }
};
struct PackKeyHash {
  size_t operator()(const PackKey& key) const {
    size_t h = key.trans_b ? 1u : 0u;
    for (int64_t v : {key.k, key.n, key.ldb})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};
struct PackPrepared {
  memory::desc plain, packed;
  memory src, dst;
  dnnl::reorder reorder;
};

// A step packs a few dozen shapes (GPT-2: two per Linear weight, one per span of the head's);
// past this many a thread's entries are dropped and rebuilt as needed (correct, slower).
constexpr size_t kPackShapesPerThread = 256;

PackPrepared& pack_prepared(const PackKey& key) {
  thread_local std::unordered_map<PackKey, PackPrepared, PackKeyHash> cache;
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  if (cache.size() >= kPackShapesPerThread) cache.clear();
  constexpr int64_t rows = PackedB::kPackedRows;
  PackPrepared p;
  p.plain = memory::desc({key.k, key.n}, memory::data_type::bf16,
                         key.trans_b ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1});
  const memory::desc a({rows, key.k}, memory::data_type::bf16, memory::dims{key.k, 1});
  const memory::desc any({key.k, key.n}, memory::data_type::bf16, memory::format_tag::any);
  const memory::desc c({rows, key.n}, memory::data_type::f32, memory::dims{key.n, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, any, c), cpu_engine());
  p.packed = pd.weights_desc();
  p.src = memory(p.plain, cpu_engine(), DNNL_MEMORY_NONE);
  p.dst = memory(p.packed, cpu_engine(), DNNL_MEMORY_NONE);
  p.reorder = dnnl::reorder(p.src, p.dst);
  return cache.emplace(key, std::move(p)).first->second;
}

}  // namespace

// oneDNN's layout, or (widened) op(B) as f32, k x n, row major.
struct PackedB::Layout {
  bool widened = false;
  memory::desc desc;
};

PackedB::PackedB() = default;
PackedB::~PackedB() = default;
PackedB::PackedB(PackedB&&) noexcept = default;
PackedB& PackedB::operator=(PackedB&&) noexcept = default;

size_t PackedB::bytes() const {
  return bytes_;
}

Result<size_t> layout_b(CpuIsa isa, bool trans_b, int64_t k, int64_t n, int64_t ldb, PackedB* out) {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  out->data_ = nullptr;
  out->bytes_ = 0;
  try {
    if (out->layout_ == nullptr) out->layout_ = std::make_unique<PackedB::Layout>();
    out->layout_->widened = widened(isa);
    if (out->layout_->widened) {
      out->layout_->desc = memory::desc();
      out->bytes_ = static_cast<size_t>(k * n) * sizeof(float);
      return out->bytes_;
    }
    out->layout_->desc = pack_prepared(PackKey{trans_b, k, n, ldb}).packed;
  } catch (const std::bad_alloc&) {
    out->layout_.reset();
    return Status::unavailable("bf16 weight layout k=" + std::to_string(k) +
                               " n=" + std::to_string(n) + ": out of memory");
  } catch (const std::exception& e) {
    // oneDNN refusing a layout for validated shapes is a bug.
    KILN_CHECK(false) << "oneDNN bf16 weight layout k=" << k << " n=" << n << " ldb=" << ldb << ": "
                      << e.what();
  }
  out->bytes_ = out->layout_->desc.get_size();
  return out->bytes_;
}

void place_b(char* data, PackedB* out) {
  KILN_CHECK(out->layout_ != nullptr && reinterpret_cast<uintptr_t>(data) % 64 == 0)
      << "place_b before layout_b, or unaligned";
  out->data_ = data;
}

void pack_b(bool trans_b, int64_t k, int64_t n, const uint16_t* b, int64_t ldb, PackedB* out) {
  KILN_CHECK(out->layout_ != nullptr && out->data_ != nullptr)
      << "pack_b before layout_b and place_b of k=" << k << " n=" << n;
  if (out->layout_->widened) {
    auto* dst = reinterpret_cast<float*>(out->data_);
    if (!trans_b) {
      widen_matrix(b, ldb, k, n, dst);
      return;
    }
    for (int64_t j = 0; j < n; ++j) {  // stored n x k: column j of op(B) is row j of b
      const uint16_t* row = b + j * ldb;
      for (int64_t r = 0; r < k; ++r)
        dst[r * n + j] = widen(row[r]);
    }
    return;
  }
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  try {
    PackPrepared& p = pack_prepared(PackKey{trans_b, k, n, ldb});
    KILN_CHECK(out->layout_ != nullptr && out->data_ != nullptr && out->layout_->desc == p.packed &&
               out->bytes_ >= p.packed.get_size())
        << "pack_b before layout_b and place_b of k=" << k << " n=" << n;
    thread_local dnnl::stream stream(cpu_engine());
    p.src.set_data_handle(const_cast<uint16_t*>(b));  // read only
    p.dst.set_data_handle(out->data_);
    // The C API with a fixed argument array, as bgemm_single_threaded: the C++ execute builds a
    // map of its arguments on the heap, every call.
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p.src.get()}, {DNNL_ARG_TO, p.dst.get()}};
    dnnl_status_t status = dnnl_primitive_execute(p.reorder.get(), stream.get(), 2, args);
    if (status == dnnl_success) status = dnnl_stream_wait(stream.get());
    KILN_CHECK(status == dnnl_success) << "oneDNN bf16 weight packing k=" << k << " n=" << n
                                       << " status " << static_cast<int>(status);
  } catch (const std::exception& e) {
    KILN_CHECK(false) << "oneDNN bf16 weight packing k=" << k << " n=" << n << " ldb=" << ldb
                      << ": " << e.what();
  }
}

PackedBUse packed_b_use_here() {
  return thread_packed_use();
}

std::vector<std::string> bf16_gemm_kernels_run_here() {
  return thread_cache().kernels();
}

std::string bf16_gemm_kernel(CpuIsa isa) {
  return widened(isa) ? std::string(kBf16WidenedKernel) : process_probe().kernel;
}

std::string bf16_gemm_widened_reason() {
  return process_probe().widened_since;
}

namespace {

// The widened path of bgemm_single_threaded (gemm_bf16.h).
void widened_gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, const float* bias,
                  float beta, float* c, int64_t ldc, bool has_pack, const float* packed_wide) {
  WidenedScratch& scratch = widened_scratch();
  float* da = nullptr;
  float* db = nullptr;
  const int64_t span = std::min(k, kWidenedSpan);
  try {
    da = grown(&scratch.a, m * span);
    if (packed_wide == nullptr) db = grown(&scratch.b, n * span);
  } catch (const std::bad_alloc&) {
    KILN_CHECK(false) << "bf16 matmul widened to f32 m=" << m << " n=" << n << " k=" << k
                      << ": out of memory for " << (m + n) * span << " floats of f32 operands";
  }
  if (packed_wide != nullptr) {
    ++thread_packed_use().read_packed;
  } else if (has_pack) {
    ++thread_packed_use().read_plain;
  }
  // The bias: C starts as it (beta 0) or gets it added after the product (beta 1).
  float c_beta = beta;
  if (bias != nullptr && beta == 0.0f) {
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(c + r * ldc, bias, static_cast<size_t>(n) * sizeof(float));
    c_beta = 1.0f;
  }
  // op(A)'s columns and op(B)'s rows [k0, k0 + kw), widened as stored (dense), then C += their
  // product (C = on the first span when beta and the bias are 0).
  for (int64_t k0 = 0; k0 < k; k0 += kWidenedSpan) {
    const int64_t kw = std::min(k, k0 + kWidenedSpan) - k0;
    if (trans_a) {  // stored k x m
      widen_matrix(a + k0 * lda, lda, kw, m, da);
    } else {  // stored m x k
      widen_matrix(a + k0, lda, m, kw, da);
    }
    const float* wb = packed_wide != nullptr ? packed_wide + k0 * n : db;
    bool wtrans_b = false;
    int64_t wldb = n;
    if (packed_wide == nullptr && trans_b) {  // stored n x k
      widen_matrix(b + k0, ldb, n, kw, db);
      wtrans_b = true, wldb = kw;
    } else if (packed_wide == nullptr) {  // stored k x n
      widen_matrix(b + k0 * ldb, ldb, kw, n, db);
    }
    sgemm_single_threaded(ctx.gemm, trans_a, wtrans_b, m, n, kw, da, trans_a ? m : kw, wb, wldb,
                          k0 == 0 ? c_beta : 1.0f, c, ldc);
  }
  if (bias != nullptr && beta != 0.0f) {
    for (int64_t r = 0; r < m; ++r) {
      float* row = c + r * ldc;
      for (int64_t j = 0; j < n; ++j)
        row[j] += bias[j];
    }
  }
}

}  // namespace

void bgemm_single_threaded(const Context& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                           int64_t ldb, const float* bias, float beta, float* c, int64_t ldc,
                           const PackedB* packed_b) {
  KILN_CHECK(beta == 0.0f || beta == 1.0f) << "bgemm beta " << beta;
  if (widened(ctx.isa)) {
    // A pack is read when it was laid out for this path (a oneDNN layout is not).
    const bool readable = packed_b != nullptr && packed_b->layout_ != nullptr &&
                          packed_b->layout_->widened && packed_b->data_ != nullptr;
    widened_gemm(ctx, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, beta, c, ldc,
                 packed_b != nullptr,
                 readable ? reinterpret_cast<const float*>(packed_b->data_) : nullptr);
    return;
  }
  // As gemm_call.cc: one OpenMP thread under each of kiln_ops' tasks (the setting is the
  // calling thread's own).
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  Key key{trans_a, trans_b, bias != nullptr, beta != 0.0f, false, m, n, k, lda, ldb, ldc};
  dnnl_status_t status = dnnl_success;
  try {
    thread_local dnnl::stream stream(cpu_engine());
    const void* b_data = b;
    Prepared* prepared = nullptr;
    if (packed_b != nullptr && (packed_b->layout_ == nullptr || packed_b->layout_->widened)) {
      ++thread_packed_use().read_plain;  // a pack for the widened path: not this call's layout
    } else if (packed_b != nullptr) {
      key.packed = true;
      prepared = &thread_cache().get(key);
      if (packed_b->data_ != nullptr && prepared->b == packed_b->layout_->desc) {
        b_data = packed_b->data_;
        ++thread_packed_use().read_packed;
      } else {
        key.packed = false;
        prepared = nullptr;
        ++thread_packed_use().read_plain;
      }
    }
    Prepared& p = prepared != nullptr ? *prepared : thread_cache().get(key);
    // oneDNN takes non-const handles; it only reads A, B and the bias.
    p.ma.set_data_handle(const_cast<uint16_t*>(a));
    p.mb.set_data_handle(const_cast<void*>(b_data));
    p.mc.set_data_handle(c);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p.ma.get()},
                               {DNNL_ARG_WEIGHTS, p.mb.get()},
                               {DNNL_ARG_DST, p.mc.get()},
                               {DNNL_ARG_BIAS, nullptr}};
    int nargs = 3;
    if (bias != nullptr) {
      p.mbias.set_data_handle(const_cast<float*>(bias));
      args[nargs++].memory = p.mbias.get();
    }
    status = dnnl_primitive_execute(p.matmul.get(), stream.get(), nargs, args);
    if (status == dnnl_success) status = dnnl_stream_wait(stream.get());
  } catch (const std::exception& e) {
    // oneDNN's refusal of validated shapes (dnnl::error), or memory for a primitive that cannot
    // be had (std::bad_alloc): neither can be reported through a pool task, and both are fatal.
    KILN_CHECK(false) << "oneDNN bf16 matmul m=" << m << " n=" << n << " k=" << k << " lda=" << lda
                      << " ldb=" << ldb << " ldc=" << ldc << ": " << e.what();
  }
  KILN_CHECK(status == dnnl_success) << "oneDNN bf16 matmul m=" << m << " n=" << n << " k=" << k
                                     << " status " << static_cast<int>(status);
}

}  // namespace kiln::ops
