// The trainer's checkpoints (see trainer_checkpoint.h).
#include "train/trainer_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>
#include <kiln/ckpt/catalog.h>
#include <kiln/ckpt/checkpoint.h>

namespace kiln::train {
namespace {

constexpr std::string_view kMomentsKey = "kiln_train_moments";  // "full", "zero" or "none"

std::string model_hash(const ModelConfig& m) {
  const std::string text =
      "gpt2 n_layer=" + std::to_string(m.n_layer) + " n_head=" + std::to_string(m.n_head) +
      " n_embd=" + std::to_string(m.n_embd) + " block_size=" + std::to_string(m.block_size) +
      " vocab_size=" + std::to_string(m.vocab_size);
  return checksum_hex(xxh3(text));
}

// Copies tensor `name` of `file` (F32, exactly `out.size()` elements) into `out`.
Status read_f32(const ckpt::SafetensorsFile& file, std::string_view name, std::span<float> out) {
  KILN_ASSIGN_OR_RETURN(ckpt::TensorEntry t, file.get(name));
  if (t.dtype != ckpt::DType::kF32 || t.bytes.size() != out.size() * sizeof(float)) {
    return Status::invalid_argument(file.path() + ": tensor '" + std::string(name) + "' has " +
                                    std::to_string(t.bytes.size()) + " bytes, this run needs " +
                                    std::to_string(out.size() * sizeof(float)) + " (F32)");
  }
  std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return Status();
}

// Copies saved moments of arena elements [at, at + saved.size() / 4) (F32 bytes) into `out`,
// this run's layout: its slice [zero_begin, zero_begin + zero_count), then its tail [tail_begin,
// total) (whole arenas are the slice [0, total) with an empty tail). Saved elements this run
// does not hold are skipped, so re-laying out the moments for another world size or ZeRO
// setting needs no whole-arena copy beside the shard file being read.
void place_moments(std::span<const std::byte> saved, size_t at, const MomentLayout& layout,
                   std::span<float> out) {
  struct Piece {
    size_t begin, count, out_at;  // an arena range, and where it starts in `out`
  };
  const size_t count = saved.size() / sizeof(float);
  const Piece mine[2] = {{layout.zero_begin, layout.zero_count, 0},
                         {layout.tail_begin, layout.total - layout.tail_begin, layout.zero_count}};
  for (const Piece& p : mine) {
    const size_t lo = std::max(at, p.begin);
    const size_t hi = std::min(at + count, p.begin + p.count);
    if (lo >= hi) continue;
    std::memcpy(out.data() + p.out_at + (lo - p.begin), saved.data() + (lo - at) * sizeof(float),
                (hi - lo) * sizeof(float));
  }
}

// The bytes of tensor `name` of `file`, which must be F32 of exactly `count` elements (`what`
// names the layout in the error).
Result<std::span<const std::byte>> f32_bytes(const ckpt::SafetensorsFile& file,
                                             std::string_view name, size_t count,
                                             const char* what) {
  KILN_ASSIGN_OR_RETURN(ckpt::TensorEntry t, file.get(name));
  if (t.dtype != ckpt::DType::kF32 || t.bytes.size() != count * sizeof(float)) {
    return Status::invalid_argument(file.path() + ": tensor '" + std::string(name) + "' has " +
                                    std::to_string(t.bytes.size()) + " bytes, " + what + " needs " +
                                    std::to_string(count * sizeof(float)) + " (F32)");
  }
  return t.bytes;
}

// Shard metadata value `key`: a decimal count, the whole value. Errors name the file and key.
Result<size_t> metadata_size(const ckpt::SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata().find(key);
  if (it == file.metadata().end()) {
    return Status::invalid_argument(file.path() + ": no __metadata__." + key);
  }
  const std::string& text = it->second;
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return Status::invalid_argument(file.path() + ": __metadata__." + key + "='" + text +
                                    "' is not a count");
  }
  return static_cast<size_t>(value);
}

// The manifest metadata field at `path` (keys from the root), which must be an unsigned integer
// (or, with `text`, a string). Errors name the checkpoint and the field.
Result<const nlohmann::json*> meta_field(const nlohmann::json& meta, const std::string& where,
                                         std::initializer_list<const char*> path) {
  const nlohmann::json* node = &meta;
  std::string name;
  for (const char* key : path) {
    name += (name.empty() ? "" : ".") + std::string(key);
    if (!node->is_object() || !node->contains(key)) {
      return Status::invalid_argument(where + ": manifest metadata has no '" + name + "'");
    }
    node = &(*node)[key];
  }
  return node;
}

Result<uint64_t> meta_unsigned(const nlohmann::json& meta, const std::string& where,
                               std::initializer_list<const char*> path) {
  KILN_ASSIGN_OR_RETURN(const nlohmann::json* node, meta_field(meta, where, path));
  if (!node->is_number_unsigned()) {
    std::string name;
    for (const char* key : path)
      name += (name.empty() ? "" : ".") + std::string(key);
    return Status::invalid_argument(where + ": manifest metadata '" + name + "' is " +
                                    node->dump() + ", not a non-negative integer");
  }
  return node->get<uint64_t>();
}

Result<std::string> meta_string(const nlohmann::json& meta, const std::string& where,
                                const char* key) {
  KILN_ASSIGN_OR_RETURN(const nlohmann::json* node, meta_field(meta, where, {key}));
  if (!node->is_string()) {
    return Status::invalid_argument(where + ": manifest metadata '" + key + "' is " + node->dump() +
                                    ", not a string");
  }
  return node->get<std::string>();
}

}  // namespace

Result<std::unique_ptr<TrainerCheckpoints>> TrainerCheckpoints::create(
    TrainerCheckpointOptions options, size_t staging_bytes) {
  if (options.world > 1 && options.store == nullptr) {
    return Status::invalid_argument("checkpoints of " + std::to_string(options.world) +
                                    " ranks need the rendezvous store for the record gather");
  }
  std::unique_ptr<TrainerCheckpoints> c(new TrainerCheckpoints());
  c->options_ = options;
  ckpt::AsyncCheckpointerOptions o;
  o.dir = options.dir;
  o.rank = options.rank;
  o.world = options.world;
  o.policy = ckpt::OverlapPolicy::kWait;
  o.keep_last = options.keep_last;
  o.staging_bytes = staging_bytes;
  o.metrics = options.metrics;
  o.log = options.log;
  if (options.world > 1) {
    comm::Store* store = options.store;
    const int rank = options.rank;
    const int world = options.world;
    o.gather = [store, rank, world, store_prefix = options.store_prefix](
                   int64_t step,
                   const ckpt::FileRecord& mine) -> Result<std::vector<ckpt::FileRecord>> {
      const std::string prefix = store_prefix + "/ckpt/" + std::to_string(step) + "/";
      KILN_RETURN_IF_ERROR(
          store->set(prefix + std::to_string(rank), ckpt::file_record_to_json(mine)));
      std::vector<ckpt::FileRecord> all;
      if (rank != 0) return all;
      for (int r = 0; r < world; ++r) {
        Result<std::string> value =
            store->get(prefix + std::to_string(r), kCheckpointGatherTimeoutMs);
        if (!value.ok()) {
          return value.status().with_context("checkpoint step " + std::to_string(step) +
                                             ": the record of rank " + std::to_string(r));
        }
        KILN_ASSIGN_OR_RETURN(ckpt::FileRecord record, ckpt::file_record_from_json(*value));
        all.push_back(std::move(record));
      }
      return all;
    };
  }
  KILN_ASSIGN_OR_RETURN(c->writer_, ckpt::AsyncCheckpointer::create(std::move(o)));
  return c;
}

Result<ResumePoint> TrainerCheckpoints::resume(const TrainConfig& config, std::span<float> params,
                                               std::span<float> m, std::span<float> v,
                                               const MomentLayout& layout) {
  KILN_CHECK(m.size() == layout.zero_count + (layout.total - layout.tail_begin) &&
             v.size() == m.size())
      << "moments of " << m.size() << " and " << v.size() << " floats for a layout of "
      << layout.zero_count << " + " << layout.total - layout.tail_begin;
  KILN_ASSIGN_OR_RETURN(ckpt::ResumeChoice choice, ckpt::find_resume_checkpoint(options_.dir));
  for (const ckpt::SkippedCheckpoint& s : choice.skipped) {
    const std::string to = choice.chosen ? "step " + std::to_string(choice.chosen->step)
                                         : std::string("a fresh start");
    options_.log.warn("passing over a checkpoint that does not verify",
                      {{"step", s.step},
                       {"path", s.path},
                       {"reason", s.reason.to_string()},
                       {"resuming_from", to}});
    if (options_.rank == 0) {
      std::cerr << "kiln train: checkpoint " << s.path << " cannot be resumed from ("
                << s.reason.to_string() << "); resuming from " << to << std::endl;
    }
    skipped_.push_back(s.path);
  }
  if (!choice.chosen) return ResumePoint{};
  const ckpt::CheckpointInfo& info = *choice.chosen;
  const std::string where = "checkpoint " + info.path;
  const nlohmann::json meta = nlohmann::json::parse(info.manifest.metadata_json, nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("model_hash") ||
      !meta.contains("loader")) {
    return Status::invalid_argument(where + ": manifest metadata is not a kiln train state");
  }
  // Every field is checked before any is used: a malformed file is an error naming the field,
  // never an exception.
  KILN_ASSIGN_OR_RETURN(const std::string saved_hash, meta_string(meta, where, "model_hash"));
  KILN_ASSIGN_OR_RETURN(const uint64_t saved_global_batch,
                        meta_unsigned(meta, where, {"global_batch"}));
  KILN_ASSIGN_OR_RETURN(const uint64_t saved_seq, meta_unsigned(meta, where, {"seq"}));
  KILN_ASSIGN_OR_RETURN(const uint64_t saved_seed, meta_unsigned(meta, where, {"seed"}));
  ResumePoint point;
  point.step = info.step;
  KILN_ASSIGN_OR_RETURN(point.loader.epoch, meta_unsigned(meta, where, {"loader", "epoch"}));
  KILN_ASSIGN_OR_RETURN(point.loader.window, meta_unsigned(meta, where, {"loader", "window"}));
  if (saved_hash != model_hash(config.model)) {
    return Status::invalid_argument(where + " holds a different model than " + config.source +
                                    " (model_hash " + saved_hash + " vs " +
                                    model_hash(config.model) + ")");
  }
  const uint64_t global_batch =
      static_cast<uint64_t>(config.train.batch) * static_cast<uint64_t>(options_.world);
  if (saved_global_batch != global_batch || saved_seq != static_cast<uint64_t>(config.train.seq) ||
      saved_seed != config.train.seed) {
    options_.log.warn(
        "resuming with another global batch, sequence or seed: the data order differs",
        {{"checkpoint", info.path}, {"saved", meta.dump()}});
  }

  // Parameters from rank 0's shard; the moments from the layout they were saved in.
  KILN_ASSIGN_OR_RETURN(ckpt::SafetensorsFile first, ckpt::load_shard(info.path, info.manifest, 0));
  KILN_RETURN_IF_ERROR(read_f32(first, "params", params));
  const std::string saved = first.metadata().count(std::string(kMomentsKey)) > 0
                                ? first.metadata().at(std::string(kMomentsKey))
                                : std::string("none");
  // This run's moments from the layout they were saved in: rank 0's whole arenas, or every
  // rank's slice and tail.
  if (saved == "full") {
    for (std::string_view name : {"adam_m", "adam_v"}) {
      KILN_ASSIGN_OR_RETURN(std::span<const std::byte> bytes,
                            f32_bytes(first, name, layout.total, "this run"));
      place_moments(bytes, 0, layout, name == "adam_m" ? m : v);
    }
  } else if (saved == "zero") {
    for (int r = 0; r < info.manifest.world; ++r) {
      KILN_ASSIGN_OR_RETURN(
          ckpt::SafetensorsFile shard,
          r == 0 ? std::move(first) : ckpt::load_shard(info.path, info.manifest, r));
      KILN_ASSIGN_OR_RETURN(size_t begin, metadata_size(shard, "zero_begin"));
      KILN_ASSIGN_OR_RETURN(size_t count, metadata_size(shard, "zero_count"));
      KILN_ASSIGN_OR_RETURN(size_t tail, metadata_size(shard, "tail_begin"));
      if (begin > layout.total || count > layout.total - begin || tail > layout.total) {
        return Status::invalid_argument(shard.path() + ": moment slice outside the arena");
      }
      const size_t n = count + (layout.total - tail);
      for (std::string_view name : {"adam_m", "adam_v"}) {
        KILN_ASSIGN_OR_RETURN(std::span<const std::byte> bytes,
                              f32_bytes(shard, name, n, "its slice and tail"));
        std::span<float> out = name == "adam_m" ? m : v;
        place_moments(bytes.first(count * sizeof(float)), begin, layout, out);
        place_moments(bytes.subspan(count * sizeof(float)), tail, layout, out);
      }
    }
  } else {
    return Status::invalid_argument(where + ": rank 0's shard has no optimizer moments");
  }
  options_.log.info("resumed from a checkpoint", {{"path", info.path},
                                                  {"step", info.step},
                                                  {"saved_world", info.manifest.world},
                                                  {"world", options_.world},
                                                  {"moments", saved}});
  return point;
}

Status TrainerCheckpoints::set_aside_skipped() {
  for (const std::string& path : skipped_) {
    if (!ckpt::read_manifest(path).status().is_not_found()) {
      KILN_ASSIGN_OR_RETURN(std::string moved, ckpt::set_aside_checkpoint(path));
      options_.log.warn("set a checkpoint that does not verify aside",
                        {{"from", path}, {"to", moved}});
    }
  }
  skipped_.clear();
  return Status();
}

bool TrainerCheckpoints::due(int64_t step, int64_t max_steps) const {
  return step == max_steps || (options_.every > 0 && step % options_.every == 0);
}

void TrainerCheckpoints::log_completed() {
  for (const ckpt::CompletedSave& done : writer_->take_completed()) {
    if (done.status.ok()) {
      options_.log.info("checkpoint durable", {{"step", done.step},
                                               {"bytes", done.record.size_bytes},
                                               {"write_s", done.write_seconds},
                                               {"committed", done.committed}});
      last_failure_ = Status();
    } else {
      // kiln_ckpt logged the failure with its file; keep it for finish(), which reports it.
      last_failure_ = done.status;
    }
  }
}

Result<double> TrainerCheckpoints::save(int64_t step, const TrainConfig& config,
                                        std::span<const float> params, std::span<const float> m,
                                        std::span<const float> v, const MomentLayout& layout,
                                        const LoaderPosition& position) {
  log_completed();
  const auto n = [](std::span<const float> s) {
    return std::vector<int64_t>{static_cast<int64_t>(s.size())};
  };
  std::vector<ckpt::TensorRef> tensors;
  std::map<std::string, std::string> shard_meta;
  if (options_.rank == 0)
    tensors.push_back({"params", ckpt::DType::kF32, n(params), params.data()});
  if (layout.sharded()) {
    tensors.push_back({"adam_m", ckpt::DType::kF32, n(m), m.data()});
    tensors.push_back({"adam_v", ckpt::DType::kF32, n(v), v.data()});
    shard_meta[std::string(kMomentsKey)] = "zero";
    shard_meta["zero_begin"] = std::to_string(layout.zero_begin);
    shard_meta["zero_count"] = std::to_string(layout.zero_count);
    shard_meta["tail_begin"] = std::to_string(layout.tail_begin);
  } else if (options_.rank == 0) {
    tensors.push_back({"adam_m", ckpt::DType::kF32, n(m), m.data()});
    tensors.push_back({"adam_v", ckpt::DType::kF32, n(v), v.data()});
    shard_meta[std::string(kMomentsKey)] = "full";
  } else {
    shard_meta[std::string(kMomentsKey)] = "none";  // replicated state lives in rank 0's shard
  }
  nlohmann::json meta = {
      {"format", "kiln-train-state"},
      {"step", step},
      {"world", options_.world},
      {"global_batch", static_cast<int64_t>(config.train.batch) * options_.world},
      {"seq", config.train.seq},
      {"seed", config.train.seed},
      {"model_hash", model_hash(config.model)},
      {"zero", layout.sharded()},
      // For people: the parameters are the f32 masters whatever the precision, and a run may
      // resume in another precision than it saved in.
      {"precision", std::string(precision_name(config.train.precision))},
      {"loader", {{"epoch", position.epoch}, {"window", position.window}}},
  };
  ckpt::SaveRequest request;
  request.step = step;
  request.tensors = tensors;
  request.shard_metadata = std::move(shard_meta);
  request.manifest_metadata_json = meta.dump();
  KILN_ASSIGN_OR_RETURN(ckpt::SaveTicket ticket, writer_->save(request));
  return ticket.stall_seconds() * 1e3;
}

Status TrainerCheckpoints::finish() {
  KILN_RETURN_IF_ERROR(writer_->wait_idle(Deadline::after_ms(kCheckpointGatherTimeoutMs * 2)));
  log_completed();
  return last_failure_;
}

}  // namespace kiln::train
