// Reading and checking the trainer's config (see include/kiln/train/train_config.h).
//
// Single-key rules (types, ranges) go through ConfigReader, which names file:line:column:key.
// Rules across keys whose range depends on an earlier key (seq <= block_size, min_lr <= lr) are
// ranges too, read after the key they depend on. The few rules a range cannot say (n_embd a
// multiple of n_head, beta below 1, eps above 0) are checked after the read and located by
// looking the key up again in the parsed YAML, so their messages carry a line as well.
#include <kiln/base/config.h>
#include <kiln/train/train_config.h>

#include <yaml-cpp/yaml.h>

#include <string_view>
#include <vector>

namespace kiln::train {
namespace {

// "file:line:column" of `section.key`'s value, or "file" when it cannot be found (the document
// was just parsed, so that only happens for a key that is absent).
std::string locate(const std::string& path, std::string_view section, std::string_view key) {
  try {
    const YAML::Node root = YAML::LoadFile(path);
    const YAML::Node value = root[std::string(section)][std::string(key)];
    if (value.IsDefined()) {
      return path + ":" + std::to_string(value.Mark().line + 1) + ":" +
             std::to_string(value.Mark().column + 1);
    }
  } catch (const YAML::Exception&) {
    // The file was readable a moment ago; without a position the message still names the file.
  }
  return path;
}

// Rules a range cannot express; each problem is one line naming the key.
std::vector<std::string> check_across_keys(const TrainConfig& c) {
  std::vector<std::string> problems;
  auto add = [&](std::string_view section, std::string_view key, const std::string& what) {
    problems.push_back(locate(c.source, section, key) + ": key '" + std::string(section) + "." +
                       std::string(key) + "': " + what);
  };
  if (c.model.n_embd % c.model.n_head != 0) {
    add("model", "n_embd",
        std::to_string(c.model.n_embd) + " is not a multiple of model.n_head (" +
            std::to_string(c.model.n_head) + "): every head needs the same width");
  }
  if (c.train.beta1 >= 1.0) add("train", "beta1", "must be below 1 (bias correction divides by 0)");
  if (c.train.beta2 >= 1.0) add("train", "beta2", "must be below 1 (bias correction divides by 0)");
  if (c.train.eps <= 0.0) add("train", "eps", "must be above 0 (it keeps AdamW's division finite)");
  if (c.train.val_batches > 0 && c.data.val.empty()) {
    problems.push_back(c.source + ": key 'data.val': required while train.val_batches > 0 (" +
                       std::to_string(c.train.val_batches) + ")");
  }
  return problems;
}

// Range check of one override, naming its flag.
Status check_flag(std::string_view flag, int64_t value, int64_t min, int64_t max,
                  std::string_view why = {}) {
  if (value >= min && value <= max) return Status();
  std::string msg = std::string(flag) + " " + std::to_string(value) + ": out of range [" +
                    std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!why.empty()) msg += " (" + std::string(why) + ")";
  return Status::invalid_argument(std::move(msg));
}

}  // namespace

Result<TrainConfig> load_train_config(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
  TrainConfig config;
  config.source = path;
  ConfigReader root = doc.root();

  ModelConfig& m = config.model;
  root.section("model", kRequired)
      .read_int("n_layer", &m.n_layer, 1, kLayersMax, kRequired)
      .read_int("n_head", &m.n_head, 1, kHeadsMax, kRequired)
      .read_int("n_embd", &m.n_embd, 1, kEmbdMax, kRequired)
      .read_int("block_size", &m.block_size, 1, kBlockSizeMax, kRequired)
      .read_int("vocab_size", &m.vocab_size, 1, kVocabSizeMax, kRequired);

  root.section("data", kRequired)
      .read_string("train", &config.data.train, kRequired)
      .read_string("val", &config.data.val);

  TrainHyperparams& h = config.train;
  ConfigReader train = root.section("train");
  train
      .read_int("batch", &h.batch, 1, kBatchMax)
      // A window longer than the position table has no embedding for its last positions.
      .read_int("seq", &h.seq, 1, m.block_size >= 1 ? m.block_size : kBlockSizeMax)
      .read_int("grad_accum", &h.grad_accum, 1, kGradAccumMax)
      .read_int("max_steps", &h.max_steps, 1, kStepsMax)
      .read_double("lr", &h.lr, 0.0, kLrMax)
      .read_double("min_lr", &h.min_lr, 0.0, h.lr)
      .read_int("warmup_steps", &h.warmup_steps, 0, kStepsMax)
      // Decay is multiplied by lr each step; above 1 it is a unit mistake.
      .read_double("weight_decay", &h.weight_decay, 0.0, 1.0)
      .read_double("beta1", &h.beta1, 0.0, 1.0)
      .read_double("beta2", &h.beta2, 0.0, 1.0)
      .read_double("eps", &h.eps, 0.0, 1.0)
      .read_double("grad_clip", &h.grad_clip, 0.0, kGradClipMax)
      .read_int("val_every", &h.val_every, 0, kStepsMax)
      .read_int("val_batches", &h.val_batches, 0, kValBatchesMax)
      .read_int("seed", &h.seed)
      .read_int("threads", &h.threads, 1, kThreadsMax)
      .read_int("zero", &h.zero, 0, 1);
  std::string precision(precision_name(h.precision));
  std::string grad_reduce(precision_name(h.grad_reduce));
  train.read_enum("precision", &precision, {"fp32", "bf16"})
      .read_enum("grad_reduce", &grad_reduce, {"fp32", "bf16"});
  KILN_RETURN_IF_ERROR(doc.finish());
  // read_enum admitted only the two names.
  h.precision = *parse_precision(precision);
  h.grad_reduce = *parse_precision(grad_reduce);

  const std::vector<std::string> problems = check_across_keys(config);
  if (!problems.empty()) {
    std::string msg;
    for (const std::string& p : problems)
      msg += (msg.empty() ? "" : "\n") + p;
    return Status::invalid_argument(std::move(msg));
  }
  return config;
}

Status apply_overrides(const TrainOverrides& o, TrainConfig* config) {
  TrainConfig c = *config;
  if (o.max_steps) {
    KILN_RETURN_IF_ERROR(check_flag("--max-steps", *o.max_steps, 1, kStepsMax));
    c.train.max_steps = *o.max_steps;
    c.overridden.insert("train.max_steps");
  }
  if (o.batch) {
    KILN_RETURN_IF_ERROR(check_flag("--batch", *o.batch, 1, kBatchMax));
    c.train.batch = *o.batch;
    c.overridden.insert("train.batch");
  }
  if (o.seq) {
    KILN_RETURN_IF_ERROR(
        check_flag("--seq", *o.seq, 1, c.model.block_size, "model.block_size in " + c.source));
    c.train.seq = *o.seq;
    c.overridden.insert("train.seq");
  }
  if (o.threads) {
    KILN_RETURN_IF_ERROR(check_flag("--threads", *o.threads, 1, kThreadsMax));
    c.train.threads = *o.threads;
    c.overridden.insert("train.threads");
  }
  if (o.seed) {
    c.train.seed = *o.seed;  // every 64-bit seed is valid
    c.overridden.insert("train.seed");
  }
  if (o.zero) {
    KILN_RETURN_IF_ERROR(check_flag("--zero", *o.zero, 0, 1));
    c.train.zero = *o.zero;
    c.overridden.insert("train.zero");
  }
  if (o.precision) {
    Result<Precision> p = parse_precision(*o.precision);
    if (!p.ok()) return p.status().with_context("--precision");
    c.train.precision = *p;
    c.overridden.insert("train.precision");
  }
  if (o.grad_reduce) {
    Result<Precision> p = parse_precision(*o.grad_reduce);
    if (!p.ok()) return p.status().with_context("--grad-reduce");
    c.train.grad_reduce = *p;
    c.overridden.insert("train.grad_reduce");
  }
  if (o.grad_accum) {
    KILN_RETURN_IF_ERROR(check_flag("--grad-accum", *o.grad_accum, 1, kGradAccumMax));
    c.train.grad_accum = *o.grad_accum;
    c.overridden.insert("train.grad_accum");
  }
  if (o.val_every) {
    KILN_RETURN_IF_ERROR(check_flag("--val-every", *o.val_every, 0, kStepsMax));
    c.train.val_every = *o.val_every;
    c.overridden.insert("train.val_every");
  }
  *config = std::move(c);
  return Status();
}

}  // namespace kiln::train
