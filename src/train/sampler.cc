// See include/kiln/train/sampler.h.
#include <kiln/base/check.h>
#include <kiln/ckpt/safetensors.h>
#include <kiln/train/sampler.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

namespace kiln::train {

TokenSampler::TokenSampler(int vocab_size, int top_k, float temperature, uint64_t seed)
    : vocab_size_(vocab_size),
      top_k_(top_k),
      temperature_(temperature),
      rng_(seed),
      ids_(static_cast<size_t>(vocab_size)) {
  KILN_CHECK(vocab_size >= 1 && top_k >= 0 && temperature >= 0)
      << "vocab " << vocab_size << ", top_k " << top_k << ", temperature " << temperature;
}

uint32_t TokenSampler::next(std::span<const float> logits) {
  KILN_CHECK(logits.size() >= static_cast<size_t>(vocab_size_))
      << logits.size() << " logits for a vocabulary of " << vocab_size_;
  // A strict total order (larger logit first, then lower id), so the selection does not depend
  // on the sort's algorithm.
  const auto before = [&](uint32_t a, uint32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::iota(ids_.begin(), ids_.end(), 0u);
  if (temperature_ == 0) return *std::min_element(ids_.begin(), ids_.end(), before);
  const size_t k = top_k_ == 0 ? ids_.size() : std::min<size_t>(top_k_, ids_.size());
  std::partial_sort(ids_.begin(), ids_.begin() + k, ids_.end(), before);

  const double max_logit = logits[ids_[0]];
  double sum = 0;
  for (size_t i = 0; i < k; ++i)
    sum += std::exp((logits[ids_[i]] - max_logit) / temperature_);
  const double u = rng_.next_double() * sum;
  double cumulative = 0;
  for (size_t i = 0; i < k; ++i) {
    cumulative += std::exp((logits[ids_[i]] - max_logit) / temperature_);
    if (u < cumulative) return ids_[i];
  }
  return ids_[k - 1];  // u * sum rounded past the last cumulative sum
}

Result<ModelConfig> read_weights_config(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::open(path));
  const std::map<std::string, std::string>& meta = file.metadata();
  const auto format = meta.find("format");
  if (format == meta.end() || format->second != "kiln-gpt2") {
    return Status::invalid_argument(
        path + ": __metadata__.format is " +
        (format == meta.end() ? std::string("missing") : "'" + format->second + "'") +
        ", not 'kiln-gpt2': not a Kiln GPT-2 weights file");
  }
  ModelConfig config;
  const std::pair<const char*, int*> fields[] = {{"n_layer", &config.n_layer},
                                                 {"n_head", &config.n_head},
                                                 {"n_embd", &config.n_embd},
                                                 {"block_size", &config.block_size},
                                                 {"vocab_size", &config.vocab_size}};
  for (const auto& [name, out] : fields) {
    const auto it = meta.find(name);
    if (it == meta.end()) {
      return Status::invalid_argument(path + ": __metadata__." + name + " is missing");
    }
    const std::string& text = it->second;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, *out);
    if (ec != std::errc() || ptr != end || text.empty()) {
      return Status::invalid_argument(path + ": __metadata__." + name + " is '" + text +
                                      "', not an integer");
    }
  }
  Status valid = config.validate();
  if (!valid.ok()) return valid.with_context(path + ": __metadata__");
  return config;
}

Status generate(Gpt2* model, std::span<const uint32_t> context, const SampleOptions& options,
                const ops::Context& ctx, const std::function<void(uint32_t)>& on_token) {
  KILN_CHECK(!context.empty()) << "generation needs at least one context token";
  const ModelConfig& config = model->config();
  const size_t window_max = static_cast<size_t>(config.block_size);
  KILN_CHECK(static_cast<size_t>(model->batch()) * model->seq() >=
             std::min(window_max, context.size() + options.tokens))
      << "model built for " << model->batch() << "x" << model->seq();
  const size_t vp = static_cast<size_t>(config.padded_vocab());

  std::vector<uint32_t> all(context.begin(), context.end());
  all.reserve(context.size() + static_cast<size_t>(options.tokens));
  std::vector<int32_t> window(window_max);
  TokenSampler sampler(config.vocab_size, options.top_k, options.temperature, options.seed);
  for (int i = 0; i < options.tokens; ++i) {
    const size_t t = std::min(all.size(), window_max);
    std::copy(all.end() - static_cast<std::ptrdiff_t>(t), all.end(), window.begin());
    KILN_RETURN_IF_ERROR(model->forward_logits(std::span<const int32_t>(window.data(), t), 1,
                                               static_cast<int>(t), ctx));
    const uint32_t id = sampler.next(model->logits().subspan((t - 1) * vp, vp));
    all.push_back(id);
    on_token(id);
  }
  return Status();
}

}  // namespace kiln::train
