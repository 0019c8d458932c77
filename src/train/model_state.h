// Gpt2::State: what a Gpt2 owns, and where every tensor lives in its arenas.
//
// Four arenas (parameters, gradients, AdamW m, AdamW v) share one layout: the ParamInfo list in
// export order, each tensor at a multiple of kArenaAlignFloats, wte followed by its (Vp - V) pad
// rows; the moment arenas are shorter (moment_floats) when they hold a ZeRO-1 rank's share. The
// activation arena holds the forward's saved tensors per layer and the backward's scratch, each a
// (rows, width) row-major block sized for create()'s (batch, seq); a smaller forward uses a prefix
// of each block. Nothing here is resized after create().
//
// Shapes use llm.c's short names: B batch, T seq, C n_embd, H n_head, D = C / H, L n_layer,
// V vocab, Vp padded vocab, N = B * T rows.
#ifndef KILN_TRAIN_MODEL_STATE_H_
#define KILN_TRAIN_MODEL_STATE_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include <kiln/ops/matmul.h>
#include <kiln/ops/tensor.h>
#include <kiln/train/model.h>

namespace kiln::train {

// 16 floats = 64 bytes: a cache line and an AVX-512 vector, so every tensor starts aligned.
inline constexpr size_t kArenaAlignFloats = 16;

// Parameters of one block, in export order; each names its index in the ParamInfo list relative
// to the block's first (so params[kFirstBlockParam + l * kParamsPerBlock + k]).
enum BlockParam : int {
  kLn1Weight = 0,  // (C)
  kLn1Bias,        // (C)
  kQkvWeight,      // (3C, C)
  kQkvBias,        // (3C)
  kProjWeight,     // (C, C)
  kProjBias,       // (C)
  kLn2Weight,      // (C)
  kLn2Bias,        // (C)
  kFcWeight,       // (4C, C)
  kFcBias,         // (4C)
  kMlpProjWeight,  // (C, 4C)
  kMlpProjBias,    // (C)
  kParamsPerBlock,
};
inline constexpr int kWteParam = 0;         // (V, C) exported; (Vp, C) in the arena
inline constexpr int kWpeParam = 1;         // (block_size, C)
inline constexpr int kFirstBlockParam = 2;  // then L * kParamsPerBlock, then ln_f weight, bias

// Offsets (floats) of one block's saved forward tensors in the activation arena.
struct LayerActs {
  size_t ln1 = 0;       // (N, C)  ln_1 output (empty in bf16: gpt2_act_layout)
  size_t ln1_mean = 0;  // (N)
  size_t ln1_rstd = 0;  // (N)
  size_t qkv = 0;       // (N, 3C) = (B, T, 3, H, D)
  size_t atty = 0;      // (N, C)  = (B, T, H, D) attention output
  size_t att_lse = 0;   // (B, H, T)
  size_t res2 = 0;      // (N, C)  residual after attention
  size_t ln2 = 0;       // (N, C)  (empty in bf16)
  size_t ln2_mean = 0;  // (N)
  size_t ln2_rstd = 0;  // (N)
  size_t fch = 0;       // (N, 4C) fc output, GELU's input
  size_t fch_gelu = 0;  // (N, 4C) GELU output, mlp.proj's input (empty in bf16)
  size_t res3 = 0;      // (N, C)  residual after the MLP: the next block's input
};

// Offsets (bf16 elements, in the bf16 activation arena) of the bf16 copies a bf16 model makes of
// each matmul's input: the forward's (kept for the weight gradients) and the backward's output
// gradients (one scratch block, reused by every linear).
struct LayerActs16 {
  size_t ln1 = 0;       // (N, C)
  size_t qkv = 0;       // (N, 3C): attention's q, k, v
  size_t atty = 0;      // (N, C)
  size_t ln2 = 0;       // (N, C)
  size_t fch_gelu = 0;  // (N, 4C)
};
struct GlobalActs16 {
  size_t lnf = 0;  // (N, C)
  size_t dy = 0;   // (N, max(Vp, 4C)): a linear's output gradient, dlogits the largest
};

// Offsets (floats) of the tensors that are not per block.
struct GlobalActs {
  size_t encoded = 0;   // (N, C)  embeddings: block 0's input
  size_t proj_out = 0;  // (N, C)  attn.proj / mlp.proj output before its residual add
  size_t lnf = 0;       // (N, C)  (empty in bf16)
  size_t lnf_mean = 0;  // (N)
  size_t lnf_rstd = 0;  // (N)
  size_t logits = 0;    // (N, Vp); in an fp32 model dlogits in place after backward
  size_t losses = 0;    // (N)
  size_t ce_lse = 0;    // (N)
  size_t dlosses = 0;   // (N)
  // Backward scratch.
  size_t dres = 0;   // (N, C)  gradient of the residual stream
  size_t dln = 0;    // (N, C)  gradient of a LayerNorm output
  size_t dqkv = 0;   // (N, 3C)
  size_t datty = 0;  // (N, C)
  size_t dfch = 0;   // (N, 4C) gradient of GELU's output, then (in place, fp32) of its input
};

// One ops::adamw_update call: a run of consecutive parameters sharing the decay flag, with the
// alignment gaps and pad rows between them (zero gradients, so they stay 0).
struct AdamSegment {
  size_t offset = 0;
  size_t count = 0;
  bool decay = false;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using FloatArena = std::unique_ptr<float[], FreeDeleter>;
using Bf16Arena = std::unique_ptr<uint16_t[], FreeDeleter>;

// What the last forward left, which decides what backward and logits() may use.
enum class ForwardPhase {
  kNone,          // no forward yet
  kWithTargets,   // a training forward: backward may run
  kLogitsOnly,    // logits only: no losses
  kBackwardDone,  // the logits are consumed (fp32: they hold dlogits)
};

struct Gpt2::State {
  ModelConfig config;
  int batch = 0;  // B of create()
  int seq = 0;    // T of create()
  std::vector<ParamInfo> params;
  std::vector<AdamSegment> adam_segments;
  std::vector<ops::TensorView> grad_views;  // the whole gradient arena, for global_grad_norm
  size_t param_floats = 0;                  // each of the parameter-shaped arenas
  size_t moment_floats = 0;                 // m and v: param_floats, or a ZeRO-1 share
  size_t act_floats = 0;
  FloatArena param_arena, grad_arena, m_arena, v_arena, act_arena;
  std::vector<LayerActs> layer_acts;  // (L)
  GlobalActs acts;
  // Precision::kBf16 only (empty for kFp32): the parameters rounded to bf16 (the whole arena, in
  // its layout; the Linear weights and wte are what the matmuls read), and the bf16 activations.
  Precision precision = Precision::kFp32;
  Bf16Arena weight16_arena, act16_arena;
  size_t act16_halves = 0;
  std::vector<LayerActs16> layer_acts16;  // (L)
  GlobalActs16 acts16;
  // The bf16 weights lag the parameters: set by whatever may change the parameters, cleared by
  // the conversion at the start of the next forward.
  bool weight16_stale = true;
  // bf16 only: the matmuls' weights (each block's four Linear weights, then the head's wte)
  // packed for the matrix units from their bf16 copies (ops::PackedWeight), parallel vectors.
  // They lag the bf16 copies: set when those change (the conversion above, AdamW's writes),
  // cleared by the packing at the start of the next forward.
  std::vector<const float*> packed_sources;   // each weight in the parameter arena
  std::vector<ops::TensorView> packed_views;  // its bf16 copy
  std::vector<ops::PackedWeight> packed;
  bool packed_stale = true;
  std::vector<int32_t> tokens;   // (N) of the last forward, for the embedding's backward
  std::vector<int32_t> targets;  // (N) of the last forward with targets
  ForwardPhase phase = ForwardPhase::kNone;
  int fwd_batch = 0, fwd_seq = 0;  // (B, T) of the last forward

  float* param(int index) { return param_arena.get() + params[index].offset; }
  float* grad(int index) { return grad_arena.get() + params[index].offset; }
  float* block_param(int layer, BlockParam p) {
    return param(kFirstBlockParam + layer * kParamsPerBlock + p);
  }
  float* block_grad(int layer, BlockParam p) {
    return grad(kFirstBlockParam + layer * kParamsPerBlock + p);
  }
  int ln_f_weight_index() const { return kFirstBlockParam + config.n_layer * kParamsPerBlock; }
  float* act(size_t offset) { return act_arena.get() + offset; }
  uint16_t* act16(size_t offset) { return act16_arena.get() + offset; }
  bool bf16() const { return precision == Precision::kBf16; }
};

// The parameter list of `config` in export order, with offsets; *arena_floats gets the size of
// each parameter arena.
std::vector<ParamInfo> gpt2_param_layout(const ModelConfig& config, size_t* arena_floats);

// The activation layout for (batch, seq); *arena_floats gets the arena's size. In bf16 the f32
// outputs of the LayerNorms and GELU (ln1, ln2, fch_gelu, lnf) are empty: those ops write only
// the bf16 copies the matmuls read (model_forward.cc), so nothing may write the f32 ones.
void gpt2_act_layout(const ModelConfig& config, int batch, int seq, Precision precision,
                     std::vector<LayerActs>* layers, GlobalActs* acts, size_t* arena_floats);

// The bf16 activation layout for (batch, seq); *arena_halves gets its size in bf16 elements.
void gpt2_act16_layout(const ModelConfig& config, int batch, int seq,
                       std::vector<LayerActs16>* layers, GlobalActs16* acts, size_t* arena_halves);

// The AdamW segments of a parameter layout.
std::vector<AdamSegment> gpt2_adam_segments(const std::vector<ParamInfo>& params,
                                            size_t arena_floats);

// Mixed precision (model_precision.cc). Each is the f32 path's view when the model is fp32.
//   The bf16 weights made current: the whole parameter arena rounded, when stale, and the
//   matmuls' weights packed from them.
Status gpt2_refresh_weight16(Gpt2::State& s, const ops::Context& ctx);
//   A matmul's weight, (rows, cols) at `w` in the parameter arena: its bf16 copy in a bf16 model.
ops::TensorView gpt2_matmul_weight(Gpt2::State& s, float* w, int64_t rows, int64_t cols);
//   Its packed copy in a bf16 model (current after gpt2_refresh_weight16), else null.
const ops::PackedWeight* gpt2_packed_weight(const Gpt2::State& s, const float* w);
//   Lists the weights a bf16 model packs (packed_sources, packed_views) and packs them once,
//   which also has their memory: a failure is create()'s. With WeightPacking::kAuto only for
//   steps of at least kPackedWeightsMinTokens tokens (B x T): packing is one more pass over the
//   weights each step (written and read back: 40-70 ms for GPT-2 small on two threads of an
//   Intel Xeon family 6 model 167, what packing adds to a step of B = 1), and what it saves,
//   oneDNN's copy of each weight inside each call, grows with the calls, one per 128 rows. There, a
//   step (`kiln_model_step_bench --model gpt2-124m --seq 256 --precision bf16 --packing
//   always|never --batch B`) was 3-10% slower packed at B = 1 and 2, the same at B = 4, 5% faster
//   at B = 8 and 6-10% at B = 16. The threshold was measured on that CPU only; whichever side of it
//   a run is, its results do not depend on the thread count.
inline constexpr int64_t kPackedWeightsMinTokens = 2048;
Status gpt2_init_packed_weights(Gpt2::State& s, WeightPacking packing);
//   A matmul's input (rows, cols) at `x`: in a bf16 model rounded now into the bf16 activation
//   arena at `offset16` (where the backward finds it again) and viewed there.
Result<ops::TensorView> gpt2_matmul_input(Gpt2::State& s, float* x, int64_t rows, int64_t cols,
                                          size_t offset16, const ops::Context& ctx);
//   Third i (q, k, v) of a fused (N, 3C) qkv view, f32 or bf16, as (B, T, H, D).
ops::TensorView gpt2_qkv_third(const ops::TensorView& qkv, int64_t i, int64_t B, int64_t T,
                               int64_t H, int64_t D);
//   An input saved by gpt2_matmul_input (the same arguments), without converting again; also
//   where an op that can write bf16 itself (LayerNorm, GELU) writes a matmul's input, so that
//   in a bf16 model the f32 buffer at `x` is neither written nor read.
ops::TensorView gpt2_saved_matmul_input(Gpt2::State& s, float* x, int64_t rows, int64_t cols,
                                        size_t offset16);

// `status` with "gpt2 <what> block <layer>: " before its message; OK stays OK without work.
Status gpt2_in_block(Status status, const char* what, int layer);

}  // namespace kiln::train

#endif  // KILN_TRAIN_MODEL_STATE_H_
