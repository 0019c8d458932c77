// See gemm_bf16.h.
#include "ops/gemm_bf16.h"

#include <omp.h>

#include <list>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <kiln/base/check.h>

namespace kiln::ops {
namespace {

using dnnl::memory;

// Shapes a thread keeps primitives for. GPT-2's step has 9 GEMM shapes per direction (a handful
// more at the edges of the blocks), and bf16 attention 5 per block of queries (T / 64 blocks:
// 80 at T = 1024); past the bound the least recently used is dropped.
constexpr size_t kPrimitivesPerThread = 256;

// The process's CPU engine: created once, never changed (oneDNN engines are thread-safe).
const dnnl::engine& cpu_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

struct Key {
  bool trans_a, trans_b, bias, accumulate;
  int64_t m, n, k, lda, ldb, ldc;
  bool operator==(const Key& o) const {
    return std::tie(trans_a, trans_b, bias, accumulate, m, n, k, lda, ldb, ldc) ==
           std::tie(o.trans_a, o.trans_b, o.bias, o.accumulate, o.m, o.n, o.k, o.lda, o.ldb, o.ldc);
  }
};
struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = (key.trans_a ? 1u : 0u) | (key.trans_b ? 2u : 0u) | (key.accumulate ? 4u : 0u) |
               (key.bias ? 8u : 0u);
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct Prepared {
  memory::desc a, b, bias, c;
  dnnl::matmul matmul;
};

// The descriptors of one GEMM: op(A) (m, k) and op(B) (k, n) as strided views of the row-major
// storage, C (m, n) with row stride ldc.
Prepared prepare(const Key& key) {
  const memory::dims a_strides = key.trans_a ? memory::dims{1, key.lda} : memory::dims{key.lda, 1};
  const memory::dims b_strides = key.trans_b ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1};
  Prepared p;
  p.a = memory::desc({key.m, key.k}, memory::data_type::bf16, a_strides);
  p.b = memory::desc({key.k, key.n}, memory::data_type::bf16, b_strides);
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
  return p;
}

// A thread's primitives, most recently used first.
class PrimitiveCache {
 public:
  const Prepared& get(const Key& key) {
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
  std::unordered_map<Key, std::list<std::pair<Key, Prepared>>::iterator, KeyHash> index_;
};

struct Probe {
  Status status;
  std::string kernel;
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
    p.status = Status::not_supported(
        std::string("bf16 matrix products: oneDNN has no bf16 matmul for this CPU (it needs "
                    "AVX-512): ") +
        e.what());
  }
  return p;
}

const Probe& process_probe() {
  static const Probe* p = new Probe(probe());  // once per process, never changed
  return *p;
}

}  // namespace

Status bf16_gemm_available() {
  return process_probe().status;
}

std::string bf16_gemm_kernel() {
  return process_probe().status.ok() ? process_probe().kernel : std::string();
}

void bgemm_single_threaded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                           const float* bias, float beta, float* c, int64_t ldc) {
  KILN_CHECK(beta == 0.0f || beta == 1.0f) << "bgemm beta " << beta;
  // As gemm_call.cc: one OpenMP thread under each of kiln_ops' tasks (the setting is the
  // calling thread's own).
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  thread_local PrimitiveCache cache;
  thread_local dnnl::stream stream(cpu_engine());
  const Key key{trans_a, trans_b, bias != nullptr, beta != 0.0f, m, n, k, lda, ldb, ldc};
  try {
    const Prepared& p = cache.get(key);
    // oneDNN takes non-const handles; it only reads A, B and the bias.
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(p.a, cpu_engine(), const_cast<uint16_t*>(a))},
        {DNNL_ARG_WEIGHTS, memory(p.b, cpu_engine(), const_cast<uint16_t*>(b))},
        {DNNL_ARG_DST, memory(p.c, cpu_engine(), c)}};
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS, memory(p.bias, cpu_engine(), const_cast<float*>(bias)));
    }
    p.matmul.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    KILN_CHECK(false) << "oneDNN bf16 matmul m=" << m << " n=" << n << " k=" << k << " lda=" << lda
                      << " ldb=" << ldb << " ldc=" << ldc << ": " << e.what();
  }
}

}  // namespace kiln::ops
