// Data parallelism: bucket planning, overlapped allreduce, and ZeRO-1 against the replicated
// optimizer step, with ranks as threads over the real transports.
#include "train/data_parallel.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kiln/ops/optimizer.h>
#include <kiln/train/model.h>

#include "comm/testing/comm_test_util.h"

namespace kiln::train {
namespace {

// A GPT-2-like arena: wte + wpe (1100 elements), n_layer blocks of `block_elems`, ln_f (10),
// with a 3-element alignment gap after every block.
struct Layout {
  std::vector<DecayRange> params;
  std::vector<GradBucket> blocks;  // block_done order: L-1 (with ln_f) down to -1
  size_t total = 0;
};

Layout layout(int n_layer, size_t block_elems) {
  Layout out;
  std::vector<size_t> block_begin;
  size_t off = 0;
  out.params.push_back({off, 1000, true});        // wte
  out.params.push_back({off + 1000, 100, true});  // wpe
  off = 1100;
  for (int l = 0; l < n_layer; ++l) {
    block_begin.push_back(off);
    out.params.push_back({off, block_elems - 7, true});       // a weight
    out.params.push_back({off + block_elems - 7, 7, false});  // its bias
    off += block_elems + 3;                                   // + gap
  }
  const size_t ln_f = off;
  out.params.push_back({ln_f, 10, false});
  out.total = ln_f + 10;
  for (int l = n_layer - 1; l >= 0; --l) {
    const size_t end = l == n_layer - 1 ? out.total : block_begin[l + 1];
    out.blocks.push_back({block_begin[l], end - block_begin[l], l});
  }
  out.blocks.push_back({0, 1100, -1});
  return out;
}

// f32 -> bf16 -> f32, nearest even; finite inputs. Written apart from kiln_ops' conversion.
float round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// One replicated AdamW step on the whole arena with the averaged gradient `g`, clipped to
// max_norm: what every ZeRO-1 rank's step must equal.
void replicated_step(const std::vector<DecayRange>& ranges, const AdamWSettings& settings, int step,
                     double max_norm, const ops::Context& ctx, std::vector<float>* params,
                     std::vector<float>* g, std::vector<float>* m, std::vector<float>* v) {
  std::vector<ops::TensorView> views{ops::TensorView::f32(g->data(), {(int64_t)g->size()})};
  const double norm = *ops::global_grad_norm(views, ctx);
  const float scale = ops::grad_clip_scale(norm, max_norm);
  for (const DecayRange& d : ranges) {
    ops::AdamWParams p;
    const int64_t n = static_cast<int64_t>(d.count);
    p.params = ops::TensorView::f32(params->data() + d.offset, {n});
    p.grads = ops::TensorView::f32(g->data() + d.offset, {n});
    p.m = ops::TensorView::f32(m->data() + d.offset, {n});
    p.v = ops::TensorView::f32(v->data() + d.offset, {n});
    p.lr = 1e-3f;
    p.weight_decay = d.decay ? settings.weight_decay : 0.0f;
    p.step = step;
    p.grad_scale = scale;
    ASSERT_TRUE(ops::adamw_update(p, ctx).ok());
  }
}

TEST(DataParallelTest, BucketsTileTheArenaInBackwardOrder) {
  const Layout a = layout(3, 50);
  // Blocks of 53-63 elements: a 1-byte minimum gives one bucket per block.
  std::vector<GradBucket> b = plan_buckets(a.blocks, 1);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].ready_after_block, 2);  // block 2 with ln_f
  EXPECT_EQ(b[0].count, 53u + 10u);
  EXPECT_EQ(b[3].ready_after_block, -1);
  EXPECT_EQ(b[3].offset, 0u);
  EXPECT_EQ(b[3].count, 1100u);
  // 400 bytes (100 elements) merges blocks pairwise; every element is covered exactly once.
  b = plan_buckets(a.blocks, 400);
  std::vector<int> covered(a.total, 0);
  int last_block = 3;
  for (const GradBucket& g : b) {
    EXPECT_LT(g.ready_after_block, last_block);
    last_block = g.ready_after_block;
    for (size_t i = g.offset; i < g.offset + g.count; ++i)
      ++covered[i];
  }
  for (size_t i = 0; i < covered.size(); ++i)
    ASSERT_EQ(covered[i], 1) << "element " << i;
  EXPECT_EQ(b.size(), 2u);  // blocks 2+1 (116 elements), then block 0 with the embeddings
}

TEST(DataParallelTest, OverlappedAllreduceAveragesEveryBucket) {
  comm::testing::ClusterSpec spec;
  spec.world_size = 2;
  auto cluster = comm::testing::ThreadCluster::create(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const Layout a = layout(3, 5000);
  const size_t total = a.total;
  std::vector<std::vector<float>> grads(2, std::vector<float>(total));
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < total; ++i)
      grads[rank][i] = static_cast<float>(rank * 2 + 1) * i;
  }
  std::vector<Status> st = (*cluster)->run([&](int rank) -> Status {
    GradAllreducer reducer(&(*cluster)->comm(rank), grads[rank], plan_buckets(a.blocks, 4096));
    for (int step = 0; step < 2; ++step) {  // reusable across steps
      if (step == 1) {
        for (size_t i = 0; i < total; ++i)
          grads[rank][i] = static_cast<float>(rank * 2 + 1) * i;
      }
      for (int block = 2; block >= 0; --block)
        reducer.on_block_done(block);
      double exposed = -1;
      KILN_RETURN_IF_ERROR(reducer.finish(&exposed));
      if (exposed < 0) return Status::invalid_argument("exposed time not reported");
    }
    return Status();
  });
  for (const Status& s : st)
    ASSERT_TRUE(s.ok()) << s.to_string();
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < total; i += 97) {
      ASSERT_EQ(grads[rank][i], 2.0f * i) << "rank " << rank << " element " << i;
    }
  }
}

// bf16 on the wire: every rank's gradient rounded to bf16 and the partial sums rounded at each
// hop, so the result is a bf16 value (its low 16 bits zero) within a few bf16 roundings of the
// mean of the rounded gradients, the same on every rank; reused across steps, as the f32 one.
TEST(DataParallelTest, ABf16WireAveragesTheRoundedGradients) {
  comm::testing::ClusterSpec spec;
  spec.world_size = 3;
  auto cluster = comm::testing::ThreadCluster::create(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const Layout a = layout(3, 5000);
  const size_t total = a.total;
  const auto value = [](int rank, size_t i) {
    return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank)) * 1.001f;
  };
  std::vector<std::vector<float>> grads(3, std::vector<float>(total));
  ops::Context ctx;  // no pool: each rank converts on its own thread
  ctx.isa = ops::supported_isas().back();
  std::vector<Status> st = (*cluster)->run([&](int rank) -> Status {
    GradAllreducer reducer(&(*cluster)->comm(rank), grads[rank], plan_buckets(a.blocks, 4096),
                           Precision::kBf16, &ctx);
    for (int step = 0; step < 2; ++step) {
      for (size_t i = 0; i < total; ++i)
        grads[rank][i] = value(rank, i);
      for (int block = 2; block >= -1; --block)
        reducer.on_block_done(block);
      KILN_RETURN_IF_ERROR(reducer.finish(nullptr));
    }
    return Status();
  });
  for (const Status& s : st)
    ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < total; ++i) {
    double mean = 0, magnitude = 0;
    for (int rank = 0; rank < 3; ++rank) {
      mean += round_bf16(value(rank, i)) / 3.0;
      magnitude += std::fabs(round_bf16(value(rank, i))) / 3.0;
    }
    const float got = grads[0][i];
    EXPECT_EQ(round_bf16(got), got) << "element " << i << " is not a bf16 value: the wire was f32";
    // Two hops and the division each round once: 3 x 2^-8 of the magnitude (2 of 3 partial sums
    // are at most 2x the mean magnitude), with room.
    ASSERT_LE(std::fabs(got - mean), 4 * std::ldexp(magnitude, -8) + 1e-30) << "element " << i;
    for (int rank = 1; rank < 3; ++rank)
      ASSERT_EQ(grads[rank][i], got) << "rank " << rank << " element " << i;
  }
}

// ZeRO-1 over 2 and 3 ranks equals the replicated update of the averaged gradient.
class ShardedAdamWTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardedAdamWTest, MatchesTheReplicatedStep) {
  const int world = GetParam();
  comm::testing::ClusterSpec spec;
  spec.world_size = world;
  auto cluster = comm::testing::ThreadCluster::create(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const Layout a = layout(2, 301);  // total not divisible by 2 or 3
  const std::vector<DecayRange>& r = a.params;
  const size_t total = a.total;
  const AdamWSettings settings{0.9f, 0.95f, 1e-8f, 0.1f};
  const double max_norm = 1.0;
  auto grad_of = [](int rank, size_t i, int step) {
    return 0.01f * static_cast<float>(std::sin(0.37 * i + rank + 0.5 * step));
  };
  std::vector<float> init(total);
  for (size_t i = 0; i < total; ++i)
    init[i] = 0.02f * static_cast<float>(std::cos(0.11 * i));

  // Replicated reference: the averaged gradient, clipped, through ops::adamw_update.
  ops::Context ctx;
  ctx.isa = CpuIsa::kScalar;
  std::vector<float> want = init, m(total, 0.0f), v(total, 0.0f), g(total);
  const int steps = 3;
  for (int step = 1; step <= steps; ++step) {
    for (size_t i = 0; i < total; ++i) {
      float sum = 0;
      for (int rank = 0; rank < world; ++rank)
        sum += grad_of(rank, i, step);
      g[i] = sum / static_cast<float>(world);
    }
    replicated_step(r, settings, step, max_norm, ctx, &want, &g, &m, &v);
  }

  std::vector<std::vector<float>> params(world, init);
  std::vector<Status> st = (*cluster)->run([&](int rank) -> Status {
    const size_t share = ShardedAdamW::moment_floats(total, world);
    std::vector<float> rank_m(share, 0.0f), rank_v(share, 0.0f);
    ShardedAdamW opt(&(*cluster)->comm(rank), r, total, rank_m, rank_v);
    std::vector<float> grads(total);
    for (int step = 1; step <= steps; ++step) {
      for (size_t i = 0; i < total; ++i)
        grads[i] = grad_of(rank, i, step);
      double norm = 0;
      KILN_RETURN_IF_ERROR(
          opt.step(params[rank], grads, settings, 1e-3f, step, max_norm, ctx, &norm));
    }
    return Status();
  });
  for (const Status& s : st)
    ASSERT_TRUE(s.ok()) << s.to_string();
  // The averaged gradients differ from the reference's by the order of the f32 sum (1 ulp),
  // which AdamW's normalisation can amplify for elements whose m is near zero: 1e-6 absolute
  // on parameters of size 0.02 after 3 steps of lr 1e-3.
  for (int rank = 0; rank < world; ++rank) {
    for (size_t i = 0; i < total; ++i) {
      ASSERT_NEAR(params[rank][i], want[i], 1e-6) << "rank " << rank << " element " << i;
    }
    EXPECT_EQ(params[rank], params[0]) << "ranks must hold identical parameters";
  }
}

// bf16 on the wire under ZeRO-1: each rank's slice of the averaged gradient is a bf16 value
// (its low 16 bits zero) within a few bf16 roundings of the mean of the rounded gradients, as the
// all-reduce's bf16 wire gives, and the step equals the replicated AdamW step on those widened
// gradients (to the order of the norm's sums, as above), the same on every rank.
TEST_P(ShardedAdamWTest, ABf16WireReduceScattersTheRoundedGradients) {
  const int world = GetParam();
  comm::testing::ClusterSpec spec;
  spec.world_size = world;
  auto cluster = comm::testing::ThreadCluster::create(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const Layout a = layout(2, 301);  // total not divisible by 2 or 3: a tail on 3 ranks
  const size_t total = a.total;
  const AdamWSettings settings{0.9f, 0.95f, 1e-8f, 0.1f};
  const double max_norm = 1.0;
  auto grad_of = [](int rank, size_t i, int step) {
    return 0.01f * static_cast<float>(std::sin(0.37 * i + rank + 0.5 * step)) * 1.001f;
  };
  std::vector<float> init(total);
  for (size_t i = 0; i < total; ++i)
    init[i] = 0.02f * static_cast<float>(std::cos(0.11 * i));
  ops::Context ctx;
  ctx.isa = CpuIsa::kScalar;
  const int steps = 3;
  // The averaged gradients as each step left them: every rank writes its slice, rank 0 the tail.
  std::vector<std::vector<float>> wire(steps + 1, std::vector<float>(total, 0.0f));
  std::vector<std::vector<float>> params(world, init);
  std::vector<Status> st = (*cluster)->run([&](int rank) -> Status {
    const size_t share = ShardedAdamW::moment_floats(total, world);
    std::vector<float> rank_m(share, 0.0f), rank_v(share, 0.0f);
    ShardedAdamW opt(&(*cluster)->comm(rank), a.params, total, rank_m, rank_v, Precision::kBf16);
    const size_t tail_begin = static_cast<size_t>(world) * (opt.shard_end() - opt.shard_begin());
    std::vector<float> grads(total);
    for (int step = 1; step <= steps; ++step) {
      for (size_t i = 0; i < total; ++i)
        grads[i] = grad_of(rank, i, step);
      double norm = 0;
      KILN_RETURN_IF_ERROR(
          opt.step(params[rank], grads, settings, 1e-3f, step, max_norm, ctx, &norm));
      for (size_t i = opt.shard_begin(); i < opt.shard_end(); ++i)
        wire[step][i] = grads[i];
      for (size_t i = tail_begin; rank == 0 && i < total; ++i)
        wire[step][i] = grads[i];
    }
    return Status();
  });
  for (const Status& s : st)
    ASSERT_TRUE(s.ok()) << s.to_string();

  std::vector<float> want = init, m(total, 0.0f), v(total, 0.0f);
  for (int step = 1; step <= steps; ++step) {
    for (size_t i = 0; i < total; ++i) {
      double mean = 0, magnitude = 0;
      for (int rank = 0; rank < world; ++rank) {
        mean += round_bf16(grad_of(rank, i, step)) / world;
        magnitude += std::fabs(round_bf16(grad_of(rank, i, step))) / world;
      }
      const float got = wire[step][i];
      ASSERT_EQ(round_bf16(got), got)
          << "step " << step << " element " << i << " is not a bf16 value: the wire was f32";
      // W - 1 hops and the division each round once, partial sums at most W x the mean
      // magnitude: 4 x 2^-8 of it covers 3 ranks with room.
      ASSERT_LE(std::fabs(got - mean), 4 * std::ldexp(magnitude, -8) + 1e-30)
          << "step " << step << " element " << i;
    }
    replicated_step(a.params, settings, step, max_norm, ctx, &want, &wire[step], &m, &v);
  }
  for (int rank = 0; rank < world; ++rank) {
    for (size_t i = 0; i < total; ++i) {
      ASSERT_NEAR(params[rank][i], want[i], 1e-6) << "rank " << rank << " element " << i;
    }
    EXPECT_EQ(params[rank], params[0]) << "ranks must hold identical parameters";
  }
}

// An overflow on one rank (an infinite gradient element) makes the global norm non-finite on
// every rank: nobody updates or gathers, so parameters and moments stay as they were, and the
// norm is reported for the trainer to stop on.
TEST_P(ShardedAdamWTest, ANonFiniteNormUpdatesNothingOnAnyRank) {
  const int world = GetParam();
  const Layout a = layout(2, 301);
  const size_t total = a.total;
  ops::Context ctx;
  ctx.isa = CpuIsa::kScalar;
  std::vector<float> init(total);
  for (size_t i = 0; i < total; ++i)
    init[i] = 0.02f * static_cast<float>(std::cos(0.11 * i));
  for (const Precision wire : {Precision::kFp32, Precision::kBf16}) {  // bf16 keeps infinity
    SCOPED_TRACE("wire " + std::string(precision_name(wire)));
    comm::testing::ClusterSpec spec;
    spec.world_size = world;
    auto cluster = comm::testing::ThreadCluster::create(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
    std::vector<std::vector<float>> params(world, init);
    std::vector<double> norms(world, 0.0);
    std::vector<Status> st = (*cluster)->run([&](int rank) -> Status {
      const size_t share = ShardedAdamW::moment_floats(total, world);
      std::vector<float> rank_m(share, 0.0f), rank_v(share, 0.0f);
      ShardedAdamW opt(&(*cluster)->comm(rank), a.params, total, rank_m, rank_v, wire);
      std::vector<float> grads(total, 0.01f);
      if (rank == world - 1) grads[total / 3] = std::numeric_limits<float>::infinity();
      KILN_RETURN_IF_ERROR(opt.step(params[rank], grads, AdamWSettings{0.9f, 0.95f, 1e-8f, 0.1f},
                                    1e-3f, 1, 1.0, ctx, &norms[rank]));
      for (float x : rank_m)
        if (x != 0.0f) return Status::aborted("a moment moved");
      return Status();
    });
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_TRUE(st[rank].ok()) << st[rank].to_string();
      EXPECT_FALSE(std::isfinite(norms[rank])) << "rank " << rank;
      EXPECT_EQ(params[rank], init) << "rank " << rank << " updated its parameters";
    }
  }
}

// ZeRO-1 saves memory: a rank's model, created as the trainer creates it under zero: 1, holds
// moment arenas of its share's size (its slice plus the tail, about 1/W of the parameter arena),
// and ShardedAdamW steps on exactly those arenas.
TEST_P(ShardedAdamWTest, ARankModelHoldsMomentArenasOfItsShareOnly) {
  const int world = GetParam();
  comm::testing::ClusterSpec spec;
  spec.world_size = world;
  auto cluster = comm::testing::ThreadCluster::create(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  ModelConfig config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  config.block_size = 16;
  config.vocab_size = 67;
  const size_t total = Gpt2::arena_floats(config);
  // Arenas end on a 16-float boundary here: no tail on 2 ranks, a tail of total % 3 on 3.
  std::vector<Status> st = (*cluster)->run([&](int rank) -> Status {
    KILN_ASSIGN_OR_RETURN(Gpt2 model,
                          Gpt2::create(config, 1, 4, zero1_moment_arenas(config, world)));
    std::vector<DecayRange> ranges;
    for (const ParamInfo& p : model.params())
      ranges.push_back({p.offset, p.numel, p.decay});
    ShardedAdamW opt(&(*cluster)->comm(rank), ranges, total, model.adam_m(), model.adam_v());
    const size_t slice = opt.shard_end() - opt.shard_begin();
    const size_t tail = total - static_cast<size_t>(world) * slice;
    const std::string who = "rank " + std::to_string(rank) + ": ";
    if (model.param_data().size() != total || model.adam_m().size() != slice + tail ||
        model.adam_v().size() != slice + tail || slice != total / static_cast<size_t>(world)) {
      return Status::invalid_argument(
          who + "moment arenas of " + std::to_string(model.adam_m().size()) + " and " +
          std::to_string(model.adam_v().size()) + " floats, the share is " + std::to_string(slice) +
          " + " + std::to_string(tail) + " of " + std::to_string(total));
    }
    model.init_weights(7);
    std::span<float> grads = model.grad_data();
    for (size_t i = 0; i < grads.size(); ++i)
      grads[i] = 1e-3f * static_cast<float>((i % 7) + 1);
    ops::Context ctx;
    ctx.isa = CpuIsa::kScalar;
    double norm = 0;
    KILN_RETURN_IF_ERROR(
        opt.step(model.param_data(), model.grad_data(), {}, 1e-3f, 1, 1.0, ctx, &norm));
    // AdamW's first step sets m = (1 - beta1) g and v = (1 - beta2) g^2: every moment of a
    // parameter in the share moved (gaps and wte's pad rows lie outside every range).
    const size_t tail_begin = total - tail;
    for (const DecayRange& d : ranges) {
      for (size_t i = d.offset; i < d.offset + d.count; ++i) {
        const bool mine = (i >= opt.shard_begin() && i < opt.shard_end()) || i >= tail_begin;
        if (!mine) continue;
        const size_t at = i >= tail_begin ? slice + (i - tail_begin) : i - opt.shard_begin();
        if (model.adam_m()[at] == 0.0f || model.adam_v()[at] == 0.0f) {
          return Status::invalid_argument(who + "the moment of element " + std::to_string(i) +
                                          " was not updated");
        }
      }
    }
    return Status();
  });
  for (const Status& s : st)
    ASSERT_TRUE(s.ok()) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShardedAdamWTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace kiln::train
