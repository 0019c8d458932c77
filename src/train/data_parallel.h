// Data parallelism over kiln_comm: gradient buckets all-reduced while the backward pass runs,
// and ZeRO-1 (optimizer state sharded across ranks).
//
// Buckets. The gradient arena holds the parameters in export order (wte, wpe, h.0 ... h.L-1,
// ln_f), and the backward finalises them from the end: ln_f and block L-1 first, block 0 last,
// then the embeddings (Gpt2::block_range gives the range each block_done(l) call finalises). A
// bucket is a contiguous range of the arena that becomes final at one block_done(l) call;
// consecutive blocks are merged until a bucket holds at least `bucket_bytes_min`, so small models
// do not pay per-op latency for every block. Buckets are submitted (async allreduce, average, in
// place) the moment they are final, in the same order on every rank (the communicator requires it),
// and finish() waits for the rest: the time it waits is the allreduce time the backward could not
// hide.
//
// ZeRO-1. Rank r owns the slice [r*s, (r+1)*s) of the flat arena of n elements, s = n / W; the
// tail [W*s, n) (fewer than W elements) is all-reduced and updated by every rank alike. After the
// backward: reduce-scatter (average) the gradients so each rank holds its slice's global gradient,
// compute the global gradient norm from the slices (one allreduce of a double), update the slice
// with AdamW, then all-gather the parameters. Its moments exist only for the slice and the tail
// (moment_floats: about 1/W of the memory): the trainer has the model allocate its moment arenas
// of exactly that size (MomentArenas::share) and hands them to ShardedAdamW.
// Elements are updated with exactly the formulas of the replicated path, so both agree to f32
// rounding. With a bf16 wire (train.grad_reduce) the gradients are reduce-scattered in bf16, as
// GradAllreducer all-reduces them; the parameters are all-gathered in f32 either way, since every
// rank's f32 masters must stay identical.
#ifndef KILN_TRAIN_DATA_PARALLEL_H_
#define KILN_TRAIN_DATA_PARALLEL_H_

#include <cstddef>
#include <span>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/work.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>
#include <kiln/train/model.h>

namespace kiln::train {

// A run of the flat parameter arena and whether AdamW's weight decay applies to it. Runs need
// not tile the arena: elements outside every run (alignment gaps, padding) are never updated.
struct DecayRange {
  size_t offset = 0;
  size_t count = 0;
  bool decay = false;
};

struct GradBucket {
  size_t offset = 0;  // elements into the gradient arena
  size_t count = 0;
  int ready_after_block = -1;  // submit at this block_done call
};

// Merges `blocks` (the range each block_done(l) call finalises, for l = n_layer-1 down to -1, in
// that order, tiling the arena downwards) into buckets of at least `bucket_bytes_min` bytes where
// neighbours allow. Every element of every block lands in exactly one bucket, in backward order.
std::vector<GradBucket> plan_buckets(const std::vector<GradBucket>& blocks,
                                     size_t bucket_bytes_min);

// Overlaps the gradient allreduce with the backward. One per training run; reused every step.
//
// The wire format (train.grad_reduce): f32, or bf16, half the bytes: a bucket is rounded into a
// bf16 staging arena (one bf16 per gradient element, allocated once) when it is submitted,
// all-reduced there in bf16 (kiln_comm adds two bf16 values in f32 and rounds the sum to bf16, at
// every hop, as NCCL does), and widened back into the f32 gradients in finish(). As PyTorch DDP's
// bf16 compression hook: each rank's gradient and each partial sum lose their low 16 bits.
class GradAllreducer {
 public:
  // `ctx` runs the bf16 conversions (the training Context: its pool is idle between ops); it is
  // used only with a bf16 wire and must outlive the reducer.
  GradAllreducer(comm::Communicator* comm, std::span<float> grads, std::vector<GradBucket> buckets,
                 Precision wire = Precision::kFp32, const ops::Context* ctx = nullptr);

  // Called by the model's backward hook: submits every bucket that became final at `block`.
  // Submission failures surface in finish().
  void on_block_done(int block);

  // Submits what is left (a backward that never reached some block), waits for every bucket and
  // returns the first error (naming the op and the failed peer, from kiln_comm). `exposed_ms`
  // gets the time spent waiting here: the allreduce time the backward did not hide.
  Status finish(double* exposed_ms);

  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  comm::Communicator* comm_;
  std::span<float> grads_;
  std::vector<GradBucket> buckets_;
  Precision wire_;
  const ops::Context* ctx_;
  std::vector<uint16_t> staging_;    // bf16 wire: one element per gradient element
  Status convert_status_;            // the first conversion failure of this step
  std::vector<comm::Work> pending_;  // one per bucket, reserved up front
  size_t next_ = 0;                  // first bucket not yet submitted
};

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// ZeRO-1: the optimizer step with moments sharded across the ranks of `comm`.
class ShardedAdamW {
 public:
  // The moment floats a rank of `world` holds for an arena of `total` elements: its slice
  // (total / world) followed by the tail (total % world). REQUIRES world >= 1.
  static size_t moment_floats(size_t total, int world);

  // `ranges` lie in the parameter arena of `total` elements. `m` and `v` (not owned; they must
  // outlive this object) hold this rank's moments, slice then tail; REQUIRES both to be
  // moment_floats(total, world) long. `wire` is the gradients' format on the wire: f32, or bf16
  // (half the bytes: the whole gradient arena is rounded into a bf16 staging arena, allocated
  // once, reduce-scattered there, and this rank's slice and the tail widened back).
  ShardedAdamW(comm::Communicator* comm, std::vector<DecayRange> ranges, size_t total,
               std::span<float> m, std::span<float> v, Precision wire = Precision::kFp32);

  // This rank's slice of the flat arena.
  size_t shard_begin() const { return begin_; }
  size_t shard_end() const { return end_; }
  std::span<float> m() { return m_; }
  std::span<float> v() { return v_; }

  // Reduce-scatters (averages) `grads`, computes the global norm into *grad_norm, clips to
  // max_norm (0: no clipping), updates this rank's slice of `params` and all-gathers them.
  // Afterwards only this rank's slice of `grads` (and the tail) holds averaged gradients (with a
  // bf16 wire, bf16 values widened to f32); `ctx` runs the optimizer and the bf16 conversions. A
  // non-finite norm (overflow or NaN; the same on every rank) updates nothing and gathers nothing.
  Status step(std::span<float> params, std::span<float> grads, const AdamWSettings& settings,
              float lr, int64_t step, double max_norm, const ops::Context& ctx, double* grad_norm);

 private:
  // The bf16 wire's reduce-scatter: grads rounded into staging_, reduced there, this rank's slice
  // and the tail [tail_begin, total) widened back into grads.
  Status reduce_scatter_bf16(std::span<float> grads, size_t tail_begin, const ops::Context& ctx);

  comm::Communicator* comm_;
  std::vector<DecayRange> ranges_;
  size_t total_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t slice_ = 0;    // total / world: the reduce-scatter block; the tail is all-reduced
  std::span<float> m_;  // (slice + tail)
  std::span<float> v_;  // (slice + tail)
  Precision wire_;
  std::vector<uint16_t> staging_;  // bf16 wire: one element per gradient element
  std::vector<ops::TensorView> slice_view_ = std::vector<ops::TensorView>(1);  // reused per step
};

// The moment arenas a ZeRO-1 rank of `world` has Gpt2::create allocate for `config`'s model:
// its share, ShardedAdamW::moment_floats of the parameter arena (world 1: the whole arena).
// REQUIRES config.validate() to be OK.
MomentArenas zero1_moment_arenas(const ModelConfig& config, int world);

}  // namespace kiln::train

#endif  // KILN_TRAIN_DATA_PARALLEL_H_
