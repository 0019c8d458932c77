// Gpt2: GPT-2 (as llm.c's train_gpt2.c) on kiln_ops, with an explicit forward and backward per
// layer, AdamW, and export to safetensors.
//
// Architecture: learned token (wte) and position (wpe) embeddings; n_layer pre-norm blocks
// (ln_1 -> causal self-attention: fused qkv Linear C->3C, ops::attention, proj Linear C->C ->
// residual; ln_2 -> MLP: fc Linear C->4C, GELU (tanh), proj Linear 4C->C -> residual); ln_f; the
// output head tied to wte (logits = x wte^T) over a padded vocabulary Vp = vocab rounded up to a
// multiple of 128. The pad rows of wte are zero and stay zero; pad logits never count.
//
// Memory: parameters, gradients and AdamW's two moments are each ONE contiguous, 64-byte aligned
// float arena, laid out in the export order below (each tensor at a 64-byte aligned offset, wte
// with its Vp - vocab zero pad rows); activations for (batch, seq) are one more arena. All of them
// are allocated by create(); forward, backward and adamw_step allocate nothing of their own (in
// bf16, oneDNN's primitives are built during the first step and kept, and libdnnl may allocate
// inside a call). The moment arenas are the parameter arena's size, or smaller: a ZeRO-1 rank's
// share (MomentArenas).
//
// Export order and names (safetensors, all F32 or all BF16 (save_weights), nn.Linear's (out, in)
// convention; wte exported without its pad rows):
//   wte.weight (V, C), wpe.weight (block_size, C),
//   for i in 0..L-1: h.{i}.ln_1.weight (C), h.{i}.ln_1.bias (C), h.{i}.attn.qkv.weight (3C, C)
//     (rows q, then k, then v; head h at rows h*D..h*D+D-1 of each), h.{i}.attn.qkv.bias (3C),
//     h.{i}.attn.proj.weight (C, C), h.{i}.attn.proj.bias (C), h.{i}.ln_2.weight (C),
//     h.{i}.ln_2.bias (C), h.{i}.mlp.fc.weight (4C, C), h.{i}.mlp.fc.bias (4C),
//     h.{i}.mlp.proj.weight (C, 4C), h.{i}.mlp.proj.bias (C),
//   ln_f.weight (C), ln_f.bias (C).
// __metadata__: format "kiln-gpt2", n_layer, n_head, n_embd, block_size, vocab_size (strings).
//
// Thread safety: a Gpt2 is used by one thread at a time; the ops spread each call over the
// Context's pool.
#ifndef KILN_TRAIN_MODEL_H_
#define KILN_TRAIN_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ops/context.h>

namespace kiln::train {

struct ModelConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;      // C; a multiple of n_head
  int block_size = 0;  // the longest sequence (rows of wpe)
  int vocab_size = 0;  // V (50257 for GPT-2)

  // Vp: vocab_size rounded up to a multiple of kVocabPadMultiple (50257 -> 50304).
  int padded_vocab() const;
  // OK iff every field is positive and n_embd divides into heads of at most
  // ops::kAttentionHeadDimMax; the error names the field and its value.
  Status validate() const;
};

// The padded vocabulary is a multiple of 128, as in llm.c: 50304 = 393 * 128 makes the head's
// GEMM dimension a multiple of every SIMD width and cache line.
inline constexpr int kVocabPadMultiple = 128;

// One parameter tensor in the arenas. offset and numel are in floats; shape is the export shape
// (wte: (vocab_size, C), its pad rows lie after it in the arena, outside numel). The ranges do
// not tile the arena: alignment gaps and wte's pad rows lie between them (block_range() tiles).
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay: the 2-D weights (Linear weights, embeddings)
};

// The floats of the arenas whose gradients one block_done(l) call finalises (block_range()).
struct BlockRange {
  size_t offset = 0;
  size_t count = 0;
};

// AdamW's hyperparameters apart from the learning rate (which the schedule sets per step).
struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to the parameters whose ParamInfo::decay is set
};

// The AdamW moment arenas Gpt2::create allocates: whole (one float per parameter-arena float,
// what adamw_step needs), or `floats` floats each, a ZeRO-1 rank's share of the optimizer state
// (ShardedAdamW::moment_floats: its slice plus the tail), which its ShardedAdamW updates. A share
// saves 2 x 4 bytes x (arena floats - floats) a rank.
struct MomentArenas {
  static MomentArenas whole() { return {}; }
  static MomentArenas share(size_t floats) { return {false, floats}; }
  bool is_whole = true;
  size_t floats = 0;  // each arena's size when !is_whole
};

// The precision of the matrix products (train.precision). kFp32: everything in f32. kBf16: mixed
// precision as PyTorch's autocast and llm.c's mainline: the Linear layers and the head multiply
// bf16 copies of their weights by bf16 copies of their inputs (the forward's activations, the
// backward's output gradients) into f32 outputs on the CPU's bf16 units (ops/matmul.h); the
// master weights, their gradients, AdamW's moments, the norms' statistics, attention's softmax,
// the residual stream, the logits and the loss stay f32. No loss scaling: bf16 has f32's range.
enum class Precision : uint8_t { kFp32, kBf16 };

std::string_view precision_name(Precision precision);  // "fp32", "bf16"

// Whether a bf16 model packs its matmul weights for the matrix units once per update
// (ops::PackedWeight), so that each matmul call reads them as they are instead of oneDNN
// repacking them inside every call. kAuto: for steps of at least 2,048 tokens (B x T), where
// measured it pays (model_state.h, kPackedWeightsMinTokens); kAlways and kNever for benchmarks
// and tests. The results may differ between packed and not in the order of sums, never with the
// thread count. An fp32 model ignores it.
enum class WeightPacking : uint8_t { kAuto, kAlways, kNever };
// kInvalidArgument naming the text and the accepted values.
Result<Precision> parse_precision(std::string_view name);

class Gpt2 {
 public:
  // Allocates (and zeroes) parameters, gradients, AdamW moments (as `moments` says) and
  // activations for (batch, seq) once. kInvalidArgument for a bad config or batch < 1, seq < 1,
  // seq > block_size, or a moment share larger than the parameter arena; kUnavailable when the
  // memory cannot be had (the message gives the bytes). With Precision::kBf16 it also allocates
  // the bf16 copies of the weights (2 bytes a parameter) and of the matmul inputs; kNotSupported
  // when this CPU has no bf16 matrix products (ops::matmul: AVX-512). A bf16 model that packs
  // its weights (`packing`) also holds them packed (about 4 bytes a weight).
  static Result<Gpt2> create(const ModelConfig& config, int batch, int seq,
                             MomentArenas moments = MomentArenas::whole(),
                             Precision precision = Precision::kFp32,
                             WeightPacking packing = WeightPacking::kAuto);

  // The floats of each parameter-shaped arena of `config` (params() with alignment gaps and
  // wte's pad rows): what param_data() will hold. REQUIRES config.validate() to be OK.
  static size_t arena_floats(const ModelConfig& config);

  Gpt2(Gpt2&&) noexcept;
  Gpt2& operator=(Gpt2&&) noexcept;
  ~Gpt2();

  // GPT-2's initialisation from Kiln's seeded PRNG (the same seed gives the same bits):
  // normal(0, 0.02) for wte, wpe and Linear weights, std 0.02/sqrt(2 n_layer) for attn.proj and
  // mlp.proj weights, biases 0, LayerNorm weight 1 and bias 0, wte's pad rows 0. Each tensor
  // draws from its own stream, seeded by (seed, its index in params()).
  void init_weights(uint64_t seed);

  const ModelConfig& config() const;
  Precision precision() const;
  int batch() const;
  int seq() const;
  const std::vector<ParamInfo>& params() const;  // in the export order
  // The whole arenas (equal sizes; ParamInfo offsets index all three, and the moments when they
  // are whole). A bf16 model refreshes its bf16 weights from the parameters before the next
  // forward after any call of the mutable param_data() (or init_weights, adamw_step).
  // The moments are MomentArenas::floats long when create() was given a share.
  std::span<float> param_data();
  std::span<const float> param_data() const;
  std::span<float> grad_data();
  std::span<const float> grad_data() const;
  std::span<float> adam_m();
  std::span<float> adam_v();

  // Forward over (batch, seq) int32 tokens (token ids in [0, vocab_size)). With targets ((batch,
  // seq), in [0, vocab_size)) returns the mean cross-entropy loss and keeps what backward needs;
  // with an empty `targets` computes the logits only and returns 0. kInvalidArgument (naming the
  // operand and position) for a wrong size or an id out of range.
  Result<float> forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        const ops::Context& ctx);
  // Logits only, over a smaller (batch, seq) than create()'s: batch * seq <= this->batch() *
  // this->seq() and seq <= block_size (for sampling, which needs a short prefix only).
  Status forward_logits(std::span<const int32_t> tokens, int batch, int seq,
                        const ops::Context& ctx);
  // (batch, seq, Vp) of the last forward; in an fp32 model backward overwrites them with dlogits
  // (a bf16 model writes its dlogits to bf16 scratch and leaves them).
  std::span<const float> logits() const;

  void zero_grad();
  // The same memset, split in 1 MiB chunks among ctx's pool threads (one thread does not fill
  // the memory bus; the arena is as large as the model). Without a pool, zero_grad().
  void zero_grad(const ops::Context& ctx);
  // Accumulates d(loss_scale * mean loss)/d(params) into the gradients (loss_scale =
  // 1/accum_steps for gradient accumulation). REQUIRES the last call to be forward() with targets
  // (kInvalidArgument otherwise: each backward consumes the logits of one forward).
  // `block_done(l)` (may be empty) is called as soon as the gradients of block_range(l) are
  // final: l = n_layer-1 down to 0, then l = -1.
  Status backward(float loss_scale, const ops::Context& ctx,
                  const std::function<void(int)>& block_done = {});
  // The arena elements whose gradients are final when block_done(block) is called: for the last
  // block its parameters and ln_f's, for the other blocks their own, for -1 wte and wpe. The
  // ranges of n_layer-1..0 and -1 partition the arenas (the hook data parallelism uses to
  // all-reduce buckets during the backward).
  BlockRange block_range(int block) const;

  // The global L2 norm of the gradients (in double).
  Result<double> grad_norm(const ops::Context& ctx);
  // One AdamW step on every parameter (`step` counts from 1; `grad_scale` multiplies every
  // gradient: the clipping factor of ops::grad_clip_scale). Weight decay only where
  // ParamInfo::decay; one ops::adamw_update per run of consecutive parameters that share the
  // decay flag (about 8 per block). Pad rows and alignment gaps have zero gradients and stay 0.
  // REQUIRES whole moment arenas (a ZeRO-1 share is ShardedAdamW's to update).
  Status adamw_step(const AdamWConfig& c, float lr, int64_t step, float grad_scale,
                    const ops::Context& ctx);

  // 6 * num_params() + 6 * n_layer * n_embd * seq: the count llm.c's gpt2_estimate_mfu uses for
  // MFU (PaLM's appendix B has 12 * L * C * T for the attention term).
  double flops_per_token(int seq) const;
  size_t num_params() const;  // the sum of ParamInfo::numel (no pad rows): GPT-2's count

  struct State;  // private, in src/train/model_state.h

 private:
  explicit Gpt2(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// Writes the parameters to `path` in the export format above (via kiln_ckpt's safetensors
// writer: a temporary file, fsync, rename), as F32, or with Precision::kBf16 as BF16 (each value
// rounded to nearest even: half the bytes, for inference). Errors name the file.
Status save_weights(const Gpt2& model, const std::string& path, Precision dtype = Precision::kFp32);

// Reads `path` into the parameters. Every tensor of the export format must be present with dtype
// F32 or BF16 (widened exactly) and the shape the model's config gives, and no other tensor may
// be; the metadata's config fields, when present, must match. Errors (kInvalidArgument, kNotFound,
// kCorruption, kIoError) name the file and the tensor; the parameters are untouched on error. wte's
// pad rows become 0.
Status load_weights(Gpt2* model, const std::string& path);

// The checks of load_weights() against `config`, without a model: a file whose metadata claims a
// large model but whose tensors are missing or the wrong size is refused before anything of that
// size is allocated (memory: the file itself). Same errors as load_weights().
Status check_weights_file(const std::string& path, const ModelConfig& config);

}  // namespace kiln::train

#endif  // KILN_TRAIN_MODEL_H_
