// save_weights / load_weights: the model's parameters as a safetensors file (the export format
// of include/kiln/train/model.h), through kiln_ckpt's reader and writer.
//
// File = every ParamInfo in export order, F32 (or all BF16), its export shape (wte without its
// pad rows), plus
// __metadata__ {format: "kiln-gpt2", n_layer, n_head, n_embd, block_size, vocab_size}. Loading is
// strict: the tensor set must be exactly the model's, each F32 or BF16 with the model's shape, and
// the metadata's config fields (those present) must equal the model's; everything is checked before
// a single parameter is written. check_weights_file() runs the same checks without a model, so a
// caller can refuse a file before allocating a model of the size its metadata claims.
#include <cstring>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <kiln/ckpt/safetensors.h>
#include <kiln/ops/convert.h>

#include "train/model_state.h"

namespace kiln::train {
namespace {

constexpr const char* kFormat = "kiln-gpt2";

std::map<std::string, std::string> config_metadata(const ModelConfig& c) {
  return {{"format", kFormat},
          {"n_layer", std::to_string(c.n_layer)},
          {"n_head", std::to_string(c.n_head)},
          {"n_embd", std::to_string(c.n_embd)},
          {"block_size", std::to_string(c.block_size)},
          {"vocab_size", std::to_string(c.vocab_size)}};
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

// `entry` is the tensor `p` describes: F32 or BF16, and p's shape.
Status check_entry(const std::string& path, const ParamInfo& p, const ckpt::TensorEntry& entry) {
  if (entry.dtype != ckpt::DType::kF32 && entry.dtype != ckpt::DType::kBF16) {
    return Status::invalid_argument(path + ": tensor " + p.name + " has dtype " +
                                    std::string(ckpt::dtype_name(entry.dtype)) +
                                    ", the model needs F32 or BF16");
  }
  if (entry.shape != p.shape) {
    return Status::invalid_argument(path + ": tensor " + p.name + " has shape " +
                                    shape_string(entry.shape) + ", the model needs " +
                                    shape_string(p.shape));
  }
  return Status();
}

// Checks `file` against `config` (metadata, then every tensor's presence, dtype and shape, then
// that no other tensor is there) and returns the entries in `params` order.
Result<std::vector<ckpt::TensorEntry>> check_file(const std::string& path,
                                                  const ckpt::SafetensorsFile& file,
                                                  const ModelConfig& config,
                                                  const std::vector<ParamInfo>& params) {
  for (const auto& [key, want] : config_metadata(config)) {
    const auto it = file.metadata().find(key);
    if (it == file.metadata().end() || it->second == want) continue;
    return Status::invalid_argument(path + ": metadata " + key + " is \"" + it->second +
                                    "\", the model has \"" + want + "\"");
  }
  std::unordered_set<std::string> names;
  std::vector<ckpt::TensorEntry> entries;
  entries.reserve(params.size());
  for (const ParamInfo& p : params) {
    names.insert(p.name);
    KILN_ASSIGN_OR_RETURN(ckpt::TensorEntry entry, file.get(p.name));
    KILN_RETURN_IF_ERROR(check_entry(path, p, entry));
    entries.push_back(std::move(entry));
  }
  for (const ckpt::TensorEntry& entry : file.tensors()) {
    if (names.count(entry.name) == 0) {
      return Status::invalid_argument(path + ": tensor " + entry.name +
                                      " is not a parameter of this GPT-2 (n_layer " +
                                      std::to_string(config.n_layer) + ")");
    }
  }
  return entries;
}

}  // namespace

Status save_weights(const Gpt2& model, const std::string& path, Precision dtype) {
  const std::span<const float> data = model.param_data();
  std::vector<ckpt::TensorRef> tensors;
  tensors.reserve(model.params().size());
  // bf16: the arena rounded once (a copy of half its size), each tensor a view into the copy.
  std::vector<uint16_t> rounded;
  if (dtype == Precision::kBf16) {
    rounded.resize(data.size());
    const auto n = static_cast<int64_t>(data.size());
    ops::Context ctx;  // single-threaded, any CPU: an export is not on a hot path
    KILN_RETURN_IF_ERROR(
        ops::convert_f32_to_bf16(ops::TensorView::f32(const_cast<float*>(data.data()), {n}),
                                 ops::TensorView::of(rounded.data(), ops::DType::kBF16, {n}), ctx)
            .with_context("save_weights " + path));
  }
  for (const ParamInfo& p : model.params()) {
    if (dtype == Precision::kBf16) {
      tensors.push_back({p.name, ckpt::DType::kBF16, p.shape, rounded.data() + p.offset});
    } else {
      tensors.push_back({p.name, ckpt::DType::kF32, p.shape, data.data() + p.offset});
    }
  }
  return ckpt::write_safetensors(path, tensors, config_metadata(model.config()))
      .with_context("save_weights");
}

Status check_weights_file(const std::string& path, const ModelConfig& config) {
  KILN_RETURN_IF_ERROR(config.validate().with_context(path));
  size_t arena_floats = 0;
  const std::vector<ParamInfo> params = gpt2_param_layout(config, &arena_floats);
  KILN_ASSIGN_OR_RETURN(const ckpt::SafetensorsFile file, ckpt::SafetensorsFile::open(path));
  return check_file(path, file, config, params).status();
}

Status load_weights(Gpt2* model, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::open(path));
  const std::vector<ParamInfo>& params = model->params();
  KILN_ASSIGN_OR_RETURN(const std::vector<ckpt::TensorEntry> entries,
                        check_file(path, file, model->config(), params));
  // Everything checked: copy. Zeroing the whole arena first also zeroes wte's pad rows.
  const std::span<float> arena = model->param_data();
  std::memset(arena.data(), 0, arena.size_bytes());
  for (size_t i = 0; i < params.size(); ++i) {
    float* dst = arena.data() + params[i].offset;
    if (entries[i].dtype == ckpt::DType::kF32) {
      std::memcpy(dst, entries[i].bytes.data(), params[i].numel * sizeof(float));
      continue;
    }
    // BF16: the upper half of each f32 (exact). The bytes may be unaligned: copied as bytes.
    const auto* bytes = reinterpret_cast<const unsigned char*>(entries[i].bytes.data());
    for (size_t j = 0; j < params[i].numel; ++j) {
      const uint32_t bits = (static_cast<uint32_t>(bytes[2 * j + 1]) << 24) |
                            (static_cast<uint32_t>(bytes[2 * j]) << 16);
      std::memcpy(dst + j, &bits, sizeof(float));
    }
  }
  return Status();
}

}  // namespace kiln::train
