// Gradient buckets overlapped with the backward, and ZeRO-1 (see data_parallel.h).
#include "train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <kiln/base/check.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/optimizer.h>
#include <kiln/ops/tensor.h>

namespace kiln::train {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

// AdamW on params[lo, hi) of the flat arena, one call per parameter piece (weight decay differs
// between parameters). m and v are indexed from `moment_base`.
Status adamw_pieces(const std::vector<DecayRange>& ranges, size_t lo, size_t hi,
                    std::span<float> params, std::span<float> grads, float* m, float* v,
                    size_t moment_base, const AdamWSettings& s, float lr, int64_t step,
                    float grad_scale, const ops::Context& ctx) {
  for (const DecayRange& r : ranges) {
    const size_t a = std::max(lo, r.offset);
    const size_t b = std::min(hi, r.offset + r.count);
    if (a >= b) continue;
    const int64_t n = static_cast<int64_t>(b - a);
    ops::AdamWParams p;
    p.params = ops::TensorView::f32(params.data() + a, {n});
    p.grads = ops::TensorView::f32(grads.data() + a, {n});
    p.m = ops::TensorView::f32(m + (a - moment_base), {n});
    p.v = ops::TensorView::f32(v + (a - moment_base), {n});
    p.lr = lr;
    p.beta1 = s.beta1;
    p.beta2 = s.beta2;
    p.eps = s.eps;
    p.weight_decay = r.decay ? s.weight_decay : 0.0f;
    p.step = step;
    p.grad_scale = grad_scale;
    KILN_RETURN_IF_ERROR(ops::adamw_update(p, ctx));
  }
  return Status();
}

}  // namespace

std::vector<GradBucket> plan_buckets(const std::vector<GradBucket>& blocks,
                                     size_t bucket_bytes_min) {
  std::vector<GradBucket> buckets;
  const size_t min_count = std::max<size_t>(1, bucket_bytes_min / sizeof(float));
  for (const GradBucket& g : blocks) {
    if (g.count == 0) continue;
    // Blocks are final in descending arena order, so a bucket still below the minimum grows
    // downwards when the next block ends where it begins.
    if (!buckets.empty() && buckets.back().count < min_count &&
        g.offset + g.count == buckets.back().offset) {
      GradBucket& open = buckets.back();
      open.offset = g.offset;
      open.count += g.count;
      open.ready_after_block = g.ready_after_block;
    } else {
      buckets.push_back(g);
    }
  }
  return buckets;
}

GradAllreducer::GradAllreducer(comm::Communicator* comm, std::span<float> grads,
                               std::vector<GradBucket> buckets, Precision wire,
                               const ops::Context* ctx)
    : comm_(comm), grads_(grads), buckets_(std::move(buckets)), wire_(wire), ctx_(ctx) {
  KILN_CHECK(wire_ == Precision::kFp32 || ctx_ != nullptr) << "a bf16 wire needs a Context";
  pending_.reserve(buckets_.size());
  if (wire_ == Precision::kBf16) staging_.resize(grads_.size());
}

void GradAllreducer::on_block_done(int block) {
  // Blocks arrive in descending order; every bucket final at this block or before goes now.
  while (next_ < buckets_.size() && buckets_[next_].ready_after_block >= block) {
    const GradBucket& b = buckets_[next_++];
    float* data = grads_.data() + b.offset;
    if (wire_ == Precision::kFp32) {
      pending_.push_back(
          comm_->allreduce(data, data, b.count, comm::DataType::kF32, comm::ReduceOp::kAvg));
      continue;
    }
    uint16_t* wire = staging_.data() + b.offset;
    const auto n = static_cast<int64_t>(b.count);
    Status s = ops::convert_f32_to_bf16(ops::TensorView::f32(data, {n}),
                                        ops::TensorView::of(wire, ops::DType::kBF16, {n}), *ctx_);
    if (!s.ok() && convert_status_.ok()) convert_status_ = s.with_context("bf16 gradient bucket");
    pending_.push_back(
        comm_->allreduce(wire, wire, b.count, comm::DataType::kBF16, comm::ReduceOp::kAvg));
  }
}

Status GradAllreducer::finish(double* exposed_ms) {
  const auto start = std::chrono::steady_clock::now();
  on_block_done(-1);
  Status first;
  for (const comm::Work& w : pending_) {
    Status s = w.wait();
    if (first.ok() && !s.ok()) first = s;
  }
  if (first.ok()) first = convert_status_;
  if (first.ok() && wire_ == Precision::kBf16) {
    for (const GradBucket& b : buckets_) {
      const auto n = static_cast<int64_t>(b.count);
      first = ops::convert_bf16_to_f32(
          ops::TensorView::of(staging_.data() + b.offset, ops::DType::kBF16, {n}),
          ops::TensorView::f32(grads_.data() + b.offset, {n}), *ctx_);
      if (!first.ok()) break;
    }
  }
  convert_status_ = Status();
  pending_.clear();
  next_ = 0;
  if (exposed_ms != nullptr) *exposed_ms = elapsed_ms(start);
  return first;
}

size_t ShardedAdamW::moment_floats(size_t total, int world) {
  KILN_CHECK(world >= 1) << "world " << world;
  const size_t w = static_cast<size_t>(world);
  return total / w + total % w;
}

ShardedAdamW::ShardedAdamW(comm::Communicator* comm, std::vector<DecayRange> ranges, size_t total,
                           std::span<float> m, std::span<float> v, Precision wire)
    : comm_(comm), ranges_(std::move(ranges)), total_(total), m_(m), v_(v), wire_(wire) {
  const size_t world = static_cast<size_t>(comm_->world_size());
  const size_t rank = static_cast<size_t>(comm_->rank());
  slice_ = total_ / world;
  begin_ = rank * slice_;
  end_ = begin_ + slice_;
  // Moments for the slice, then for the shared tail [world * slice, total).
  const size_t want = moment_floats(total_, comm_->world_size());
  KILN_CHECK(m_.size() == want && v_.size() == want)
      << "ShardedAdamW rank " << rank << " of " << world << ": moments of " << m_.size() << " and "
      << v_.size() << " floats, the share is " << want;
  if (wire_ == Precision::kBf16) staging_.resize(total_);
}

Status ShardedAdamW::step(std::span<float> params, std::span<float> grads,
                          const AdamWSettings& settings, float lr, int64_t step, double max_norm,
                          const ops::Context& ctx, double* grad_norm) {
  KILN_CHECK(params.size() == total_ && grads.size() == total_);
  const size_t world = static_cast<size_t>(comm_->world_size());
  const size_t tail_begin = world * slice_;
  const size_t tail = total_ - tail_begin;

  // Gradients: this rank's slice averaged in place, the tail averaged everywhere.
  if (wire_ == Precision::kFp32) {
    comm::Work scatter = comm_->reduce_scatter(grads.data(), grads.data() + begin_, slice_,
                                               comm::DataType::kF32, comm::ReduceOp::kAvg);
    comm::Work tail_reduce = comm_->allreduce(grads.data() + tail_begin, grads.data() + tail_begin,
                                              tail, comm::DataType::kF32, comm::ReduceOp::kAvg);
    KILN_RETURN_IF_ERROR(scatter.wait());
    KILN_RETURN_IF_ERROR(tail_reduce.wait());
  } else {
    KILN_RETURN_IF_ERROR(reduce_scatter_bf16(grads, tail_begin, ctx));
  }

  // Global norm: squares of the slices summed over ranks, plus the tail once.
  slice_view_[0] = ops::TensorView::f32(grads.data() + begin_, {static_cast<int64_t>(slice_)});
  KILN_ASSIGN_OR_RETURN(double slice_norm, ops::global_grad_norm(slice_view_, ctx));
  double sum_sq = slice_norm * slice_norm;
  KILN_RETURN_IF_ERROR(comm_->run(comm::CollectiveArgs::allreduce(
      &sum_sq, &sum_sq, 1, comm::DataType::kF64, comm::ReduceOp::kSum)));
  for (size_t i = tail_begin; i < total_; ++i) {
    sum_sq += static_cast<double>(grads[i]) * static_cast<double>(grads[i]);
  }
  const double norm = std::sqrt(sum_sq);
  if (grad_norm != nullptr) *grad_norm = norm;
  // A non-finite norm, the same on every rank (all-reduced): no update and no all-gather on any
  // rank, so the parameters and moments stay the last good step's; the trainer stops the run.
  if (!std::isfinite(norm)) return Status();
  const float scale = max_norm > 0 ? ops::grad_clip_scale(norm, max_norm) : 1.0f;

  KILN_RETURN_IF_ERROR(adamw_pieces(ranges_, begin_, end_, params, grads, m_.data(), v_.data(),
                                    begin_, settings, lr, step, scale, ctx));
  KILN_RETURN_IF_ERROR(adamw_pieces(ranges_, tail_begin, total_, params, grads, m_.data() + slice_,
                                    v_.data() + slice_, tail_begin, settings, lr, step, scale,
                                    ctx));
  // In place: rank r's slice already sits at params + r * slice.
  return comm_->run(comm::CollectiveArgs::allgather(params.data() + begin_, params.data(), slice_,
                                                    comm::DataType::kF32));
}

Status ShardedAdamW::reduce_scatter_bf16(std::span<float> grads, size_t tail_begin,
                                         const ops::Context& ctx) {
  const auto bf16_view = [&](size_t at, size_t n) {
    return ops::TensorView::of(staging_.data() + at, ops::DType::kBF16, {static_cast<int64_t>(n)});
  };
  const auto f32_view = [&](size_t at, size_t n) {
    return ops::TensorView::f32(grads.data() + at, {static_cast<int64_t>(n)});
  };
  const size_t tail = total_ - tail_begin;
  // A failed rounding is reported after the collectives, which every rank must join (a rank
  // that left early would stall its peers until the communicator's timeout).
  const Status rounded = ops::convert_f32_to_bf16(f32_view(0, total_), bf16_view(0, total_), ctx)
                             .with_context("bf16 gradient reduce-scatter");
  uint16_t* wire = staging_.data();
  comm::Work scatter = comm_->reduce_scatter(wire, wire + begin_, slice_, comm::DataType::kBF16,
                                             comm::ReduceOp::kAvg);
  comm::Work tail_reduce = comm_->allreduce(wire + tail_begin, wire + tail_begin, tail,
                                            comm::DataType::kBF16, comm::ReduceOp::kAvg);
  KILN_RETURN_IF_ERROR(scatter.wait());
  KILN_RETURN_IF_ERROR(tail_reduce.wait());
  KILN_RETURN_IF_ERROR(rounded);
  KILN_RETURN_IF_ERROR(
      ops::convert_bf16_to_f32(bf16_view(begin_, slice_), f32_view(begin_, slice_), ctx));
  if (tail == 0) return Status();
  return ops::convert_bf16_to_f32(bf16_view(tail_begin, tail), f32_view(tail_begin, tail), ctx);
}

MomentArenas zero1_moment_arenas(const ModelConfig& config, int world) {
  return MomentArenas::share(ShardedAdamW::moment_floats(Gpt2::arena_floats(config), world));
}

}  // namespace kiln::train
