// Gpt2: creation (every arena allocated and zeroed once), accessors, and the optimizer step.
//
// The forward is in model_forward.cc, the backward in model_backward.cc, the initialisation in
// model_init.cc and the safetensors export in model_io.cc. adamw_step and grad_norm work on the
// whole arenas: alignment gaps and wte's pad rows have zero gradients, so they add nothing to the
// norm and AdamW leaves them at zero. Under ZeRO-1 the moment arenas are a rank's share and
// ShardedAdamW, not adamw_step, updates them.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include <kiln/base/thread_pool.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/optimizer.h>

#include "train/model_state.h"

namespace kiln::train {
namespace {

// Arenas of at least a huge page are aligned to one and offered to the kernel for transparent
// huge pages (MADV_HUGEPAGE: in the THP mode "madvise", this machine's, the kernel backs only
// what is asked; under "always" the advice changes nothing, under "never" it is ignored).
// Every step streams the parameter-shaped arenas whole (AdamW reads and writes 30 bytes a
// parameter, the gradient norm reads 4) and the activations in large strides; with 4 KiB pages
// that is a TLB miss every 4 KiB. Measured with kiln_model_step_bench (gpt2-124m, 4 x 256, bf16,
// two threads of an Intel Xeon family 6 model 167): AdamW 96 -> 87 ms, the gradient norm
// 26 -> 18 ms. Where the kernel has no huge page to give, the advice is a no-op.
constexpr size_t kHugePage = size_t{2} << 20;

// A zeroed arena of `count` elements of T (float, or uint16_t for bf16), 64-byte aligned (huge-
// page aligned and advised when that large), touched now, so the first step does not pay for
// page faults; kUnavailable naming `what` when the memory cannot be had.
template <typename T>
Result<std::unique_ptr<T[], FreeDeleter>> make_arena(size_t count, const char* what) {
  const size_t wanted = count * sizeof(T);
  const size_t align = wanted >= kHugePage ? kHugePage : 64;
  const size_t bytes = (wanted + align - 1) / align * align;
  auto* data = static_cast<T*>(std::aligned_alloc(align, bytes == 0 ? align : bytes));
  if (data == nullptr) {
    return Status::unavailable("gpt2: cannot allocate the " + std::string(what) + " arena of " +
                               std::to_string(bytes) + " bytes");
  }
  // Advice only: a kernel without THP (or with it off) refuses it and small pages serve.
  if (align == kHugePage) (void)::madvise(data, bytes, MADV_HUGEPAGE);
  std::memset(data, 0, bytes);
  return std::unique_ptr<T[], FreeDeleter>(data);
}

}  // namespace

Result<Gpt2> Gpt2::create(const ModelConfig& config, int batch, int seq, MomentArenas moments,
                          Precision precision, WeightPacking packing) {
  KILN_RETURN_IF_ERROR(config.validate());
  if (batch < 1 || seq < 1 || seq > config.block_size) {
    return Status::invalid_argument("gpt2: batch " + std::to_string(batch) + " and seq " +
                                    std::to_string(seq) + " must be >= 1, seq <= block_size " +
                                    std::to_string(config.block_size));
  }
  auto s = std::make_unique<State>();
  s->config = config;
  s->batch = batch;
  s->seq = seq;
  s->params = gpt2_param_layout(config, &s->param_floats);
  if (!moments.is_whole && moments.floats > s->param_floats) {
    return Status::invalid_argument("gpt2: a moment share of " + std::to_string(moments.floats) +
                                    " floats is larger than the parameter arena (" +
                                    std::to_string(s->param_floats) + ")");
  }
  s->moment_floats = moments.is_whole ? s->param_floats : moments.floats;
  s->adam_segments = gpt2_adam_segments(s->params, s->param_floats);
  gpt2_act_layout(config, batch, seq, precision, &s->layer_acts, &s->acts, &s->act_floats);
  KILN_ASSIGN_OR_RETURN(s->param_arena, make_arena<float>(s->param_floats, "parameter"));
  KILN_ASSIGN_OR_RETURN(s->grad_arena, make_arena<float>(s->param_floats, "gradient"));
  KILN_ASSIGN_OR_RETURN(s->m_arena, make_arena<float>(s->moment_floats, "AdamW m"));
  KILN_ASSIGN_OR_RETURN(s->v_arena, make_arena<float>(s->moment_floats, "AdamW v"));
  KILN_ASSIGN_OR_RETURN(s->act_arena, make_arena<float>(s->act_floats, "activation"));
  s->precision = precision;
  if (precision == Precision::kBf16) {
    gpt2_act16_layout(config, batch, seq, &s->layer_acts16, &s->acts16, &s->act16_halves);
    KILN_ASSIGN_OR_RETURN(s->weight16_arena, make_arena<uint16_t>(s->param_floats, "bf16 weight"));
    KILN_ASSIGN_OR_RETURN(s->act16_arena, make_arena<uint16_t>(s->act16_halves, "bf16 activation"));
    KILN_RETURN_IF_ERROR(gpt2_init_packed_weights(*s, packing));
  }
  s->grad_views = {
      ops::TensorView::f32(s->grad_arena.get(), {static_cast<int64_t>(s->param_floats)})};
  const size_t rows = static_cast<size_t>(batch) * static_cast<size_t>(seq);
  s->tokens.assign(rows, 0);
  s->targets.assign(rows, 0);
  return Gpt2(std::move(s));
}

size_t Gpt2::arena_floats(const ModelConfig& config) {
  size_t floats = 0;
  gpt2_param_layout(config, &floats);
  return floats;
}

Gpt2::Gpt2(std::unique_ptr<State> state) : s_(std::move(state)) {}
Gpt2::Gpt2(Gpt2&&) noexcept = default;
Gpt2& Gpt2::operator=(Gpt2&&) noexcept = default;
Gpt2::~Gpt2() = default;

const ModelConfig& Gpt2::config() const {
  return s_->config;
}
Precision Gpt2::precision() const {
  return s_->precision;
}
int Gpt2::batch() const {
  return s_->batch;
}
int Gpt2::seq() const {
  return s_->seq;
}
const std::vector<ParamInfo>& Gpt2::params() const {
  return s_->params;
}

std::span<float> Gpt2::param_data() {
  s_->weight16_stale = true;  // the caller may write
  return {s_->param_arena.get(), s_->param_floats};
}
std::span<const float> Gpt2::param_data() const {
  return {s_->param_arena.get(), s_->param_floats};
}
std::span<float> Gpt2::grad_data() {
  return {s_->grad_arena.get(), s_->param_floats};
}
std::span<const float> Gpt2::grad_data() const {
  return {s_->grad_arena.get(), s_->param_floats};
}
std::span<float> Gpt2::adam_m() {
  return {s_->m_arena.get(), s_->moment_floats};
}
std::span<float> Gpt2::adam_v() {
  return {s_->v_arena.get(), s_->moment_floats};
}

std::span<const float> Gpt2::logits() const {
  const size_t rows = static_cast<size_t>(s_->fwd_batch) * static_cast<size_t>(s_->fwd_seq);
  return {s_->act_arena.get() + s_->acts.logits,
          rows * static_cast<size_t>(s_->config.padded_vocab())};
}

void Gpt2::zero_grad() {
  std::memset(s_->grad_arena.get(), 0, s_->param_floats * sizeof(float));
}

void Gpt2::zero_grad(const ops::Context& ctx) {
  // One thread's memset does not fill the memory bus (0.5 GB for GPT-2 small: about 50 ms of
  // a step in a perf profile of kiln_model_step_bench on one thread of an Intel Xeon family 6
  // model 167), so the pool's threads share it.
  constexpr size_t kChunkFloats = size_t{1} << 18;  // 1 MiB
  float* grads = s_->grad_arena.get();
  const size_t n = s_->param_floats;
  const auto chunks = static_cast<int64_t>((n + kChunkFloats - 1) / kChunkFloats);
  if (ctx.pool == nullptr || chunks < 2) {
    zero_grad();
    return;
  }
  ctx.pool->parallel_for(chunks, [&](int64_t chunk, int) {
    const size_t begin = static_cast<size_t>(chunk) * kChunkFloats;
    const size_t count = std::min(n - begin, kChunkFloats);
    std::memset(grads + begin, 0, count * sizeof(float));
  });
}

BlockRange Gpt2::block_range(int block) const {
  const int L = s_->config.n_layer;
  KILN_CHECK(block >= -1 && block < L) << "block " << block << " of " << L;
  const auto start = [&](int b) {
    return s_->params[static_cast<size_t>(kFirstBlockParam + b * kParamsPerBlock)].offset;
  };
  if (block == -1) return {0, start(0)};
  const size_t end = block == L - 1 ? s_->param_floats : start(block + 1);
  return {start(block), end - start(block)};
}

Result<double> Gpt2::grad_norm(const ops::Context& ctx) {
  return ops::global_grad_norm(s_->grad_views, ctx);
}

Status Gpt2::adamw_step(const AdamWConfig& c, float lr, int64_t step, float grad_scale,
                        const ops::Context& ctx) {
  KILN_CHECK(s_->moment_floats == s_->param_floats)
      << "gpt2 adamw_step needs whole moment arenas, this model holds a share of "
      << s_->moment_floats << " of " << s_->param_floats << " floats (ShardedAdamW's)";
  // A bf16 model's weights are rounded as each segment is updated: the segments tile the arena,
  // so afterwards the copy is current (unless a segment failed, below).
  s_->weight16_stale = true;
  for (const AdamSegment& seg : s_->adam_segments) {
    const auto n = static_cast<int64_t>(seg.count);
    ops::AdamWParams p;
    p.params = ops::TensorView::f32(s_->param_arena.get() + seg.offset, {n});
    p.grads = ops::TensorView::f32(s_->grad_arena.get() + seg.offset, {n});
    p.m = ops::TensorView::f32(s_->m_arena.get() + seg.offset, {n});
    p.v = ops::TensorView::f32(s_->v_arena.get() + seg.offset, {n});
    p.lr = lr;
    p.beta1 = c.beta1;
    p.beta2 = c.beta2;
    p.eps = c.eps;
    p.weight_decay = seg.decay ? c.weight_decay : 0.0f;
    p.step = step;
    p.grad_scale = grad_scale;
    if (s_->bf16()) {
      p.params_bf16 =
          ops::TensorView::of(s_->weight16_arena.get() + seg.offset, ops::DType::kBF16, {n});
    }
    KILN_RETURN_IF_ERROR(ops::adamw_update(p, ctx));
  }
  s_->weight16_stale = !s_->bf16();
  s_->packed_stale = true;
  return Status();
}

double Gpt2::flops_per_token(int seq) const {
  const ModelConfig& c = s_->config;
  return 6.0 * static_cast<double>(num_params()) +
         6.0 * static_cast<double>(c.n_layer) * static_cast<double>(c.n_embd) * seq;
}

size_t Gpt2::num_params() const {
  size_t n = 0;
  for (const ParamInfo& p : s_->params)
    n += p.numel;
  return n;
}

}  // namespace kiln::train
