// The model's configuration checks and the layouts of its arenas (see model_state.h).
//
// Parameter arena: the ParamInfo list in export order, each tensor starting at a multiple of
// kArenaAlignFloats; wte occupies (Vp, C) floats, the last Vp - V rows being the zero pad rows of
// the tied output head. Because the order is the export order, each block's parameters are one
// contiguous range, which is what block_range() hands to data parallelism.
//
// Activation arena: per block the tensors the backward reads (LayerActs), then the global ones
// and the backward's scratch (GlobalActs), each aligned like the parameters.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/ops/attention.h>

#include "train/model_state.h"

namespace kiln::train {
namespace {

size_t align_up(size_t floats) {
  return (floats + kArenaAlignFloats - 1) / kArenaAlignFloats * kArenaAlignFloats;
}

// Hands out aligned offsets from the start of an arena.
class Bump {
 public:
  size_t take(size_t floats) {
    const size_t offset = next_;
    next_ = align_up(next_ + floats);
    return offset;
  }
  size_t size() const { return next_; }

 private:
  size_t next_ = 0;
};

size_t numel_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape)
    n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

int ModelConfig::padded_vocab() const {
  return (vocab_size + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple;
}

Status ModelConfig::validate() const {
  const std::pair<const char*, int> fields[] = {{"n_layer", n_layer},
                                                {"n_head", n_head},
                                                {"n_embd", n_embd},
                                                {"block_size", block_size},
                                                {"vocab_size", vocab_size}};
  for (const auto& [name, value] : fields) {
    if (value < 1) {
      return Status::invalid_argument("model config: " + std::string(name) + " is " +
                                      std::to_string(value) + ", must be at least 1");
    }
  }
  if (n_embd % n_head != 0) {
    return Status::invalid_argument("model config: n_embd " + std::to_string(n_embd) +
                                    " is not a multiple of n_head " + std::to_string(n_head));
  }
  if (n_embd / n_head > ops::kAttentionHeadDimMax) {
    return Status::invalid_argument(
        "model config: head size n_embd / n_head = " + std::to_string(n_embd / n_head) +
        " exceeds " + std::to_string(ops::kAttentionHeadDimMax));
  }
  // The GEMMs take int dimensions: every matrix dimension must fit (4C and Vp are the largest).
  if (static_cast<int64_t>(vocab_size) + kVocabPadMultiple > INT32_MAX ||
      static_cast<int64_t>(n_embd) * 4 > INT32_MAX) {
    return Status::invalid_argument("model config: vocab_size or 4 * n_embd exceeds 2^31");
  }
  return Status();
}

std::vector<ParamInfo> gpt2_param_layout(const ModelConfig& config, size_t* arena_floats) {
  const int64_t C = config.n_embd;
  const int64_t V = config.vocab_size;
  const int64_t Vp = config.padded_vocab();
  std::vector<ParamInfo> params;
  Bump bump;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, size_t reserve) {
    ParamInfo p;
    p.name = std::move(name);
    p.numel = numel_of(shape);
    p.shape = std::move(shape);
    p.offset = bump.take(reserve == 0 ? p.numel : reserve);
    p.decay = decay;
    params.push_back(std::move(p));
  };
  add("wte.weight", {V, C}, true, static_cast<size_t>(Vp * C));
  add("wpe.weight", {config.block_size, C}, true, 0);
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, false, 0);
    add(h + "ln_1.bias", {C}, false, 0);
    add(h + "attn.qkv.weight", {3 * C, C}, true, 0);
    add(h + "attn.qkv.bias", {3 * C}, false, 0);
    add(h + "attn.proj.weight", {C, C}, true, 0);
    add(h + "attn.proj.bias", {C}, false, 0);
    add(h + "ln_2.weight", {C}, false, 0);
    add(h + "ln_2.bias", {C}, false, 0);
    add(h + "mlp.fc.weight", {4 * C, C}, true, 0);
    add(h + "mlp.fc.bias", {4 * C}, false, 0);
    add(h + "mlp.proj.weight", {C, 4 * C}, true, 0);
    add(h + "mlp.proj.bias", {C}, false, 0);
  }
  add("ln_f.weight", {C}, false, 0);
  add("ln_f.bias", {C}, false, 0);
  *arena_floats = bump.size();
  return params;
}

void gpt2_act_layout(const ModelConfig& config, int batch, int seq, Precision precision,
                     std::vector<LayerActs>* layers, GlobalActs* acts, size_t* arena_floats) {
  const size_t N = static_cast<size_t>(batch) * static_cast<size_t>(seq);
  // The f32 outputs of the LayerNorms and GELU exist only in fp32 (model_state.h).
  const size_t f32_only = precision == Precision::kFp32 ? 1 : 0;
  const size_t C = static_cast<size_t>(config.n_embd);
  const size_t H = static_cast<size_t>(config.n_head);
  const size_t Vp = static_cast<size_t>(config.padded_vocab());
  Bump bump;
  layers->assign(static_cast<size_t>(config.n_layer), LayerActs{});
  for (LayerActs& a : *layers) {
    a.ln1 = bump.take(f32_only * N * C);
    a.ln1_mean = bump.take(N);
    a.ln1_rstd = bump.take(N);
    a.qkv = bump.take(N * 3 * C);
    a.atty = bump.take(N * C);
    a.att_lse = bump.take(N * H);
    a.res2 = bump.take(N * C);
    a.ln2 = bump.take(f32_only * N * C);
    a.ln2_mean = bump.take(N);
    a.ln2_rstd = bump.take(N);
    a.fch = bump.take(N * 4 * C);
    a.fch_gelu = bump.take(f32_only * N * 4 * C);
    a.res3 = bump.take(N * C);
  }
  GlobalActs& g = *acts;
  g.encoded = bump.take(N * C);
  g.proj_out = bump.take(N * C);
  g.lnf = bump.take(f32_only * N * C);
  g.lnf_mean = bump.take(N);
  g.lnf_rstd = bump.take(N);
  g.logits = bump.take(N * Vp);
  g.losses = bump.take(N);
  g.ce_lse = bump.take(N);
  g.dlosses = bump.take(N);
  g.dres = bump.take(N * C);
  g.dln = bump.take(N * C);
  g.dqkv = bump.take(N * 3 * C);
  g.datty = bump.take(N * C);
  g.dfch = bump.take(N * 4 * C);
  *arena_floats = bump.size();
}

void gpt2_act16_layout(const ModelConfig& config, int batch, int seq,
                       std::vector<LayerActs16>* layers, GlobalActs16* acts, size_t* arena_halves) {
  const size_t N = static_cast<size_t>(batch) * static_cast<size_t>(seq);
  const size_t C = static_cast<size_t>(config.n_embd);
  const size_t Vp = static_cast<size_t>(config.padded_vocab());
  // Bump counts floats; a bf16 block of n elements takes n / 2 of them (rounded up), so every
  // block keeps Bump's alignment (64 bytes) in the bf16 arena too: offsets double.
  Bump bump;
  const auto take = [&](size_t halves) { return 2 * bump.take((halves + 1) / 2); };
  layers->assign(static_cast<size_t>(config.n_layer), LayerActs16{});
  for (LayerActs16& a : *layers) {
    a.ln1 = take(N * C);
    a.qkv = take(N * 3 * C);
    a.atty = take(N * C);
    a.ln2 = take(N * C);
    a.fch_gelu = take(N * 4 * C);
  }
  acts->lnf = take(N * C);
  acts->dy = take(N * std::max(Vp, 4 * C));
  *arena_halves = 2 * bump.size();
}

std::vector<AdamSegment> gpt2_adam_segments(const std::vector<ParamInfo>& params,
                                            size_t arena_floats) {
  std::vector<AdamSegment> segments;
  for (size_t i = 0; i < params.size(); ++i) {
    const size_t end = i + 1 < params.size() ? params[i + 1].offset : arena_floats;
    if (!segments.empty() && segments.back().decay == params[i].decay) {
      segments.back().count = end - segments.back().offset;
    } else {
      segments.push_back({params[i].offset, end - params[i].offset, params[i].decay});
    }
  }
  return segments;
}

Status gpt2_in_block(Status status, const char* what, int layer) {
  if (status.ok()) return status;
  return status.with_context("gpt2 " + std::string(what) + " block " + std::to_string(layer));
}

}  // namespace kiln::train
