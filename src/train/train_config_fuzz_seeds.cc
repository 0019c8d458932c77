// Seeds for fuzz/train_config: configs/tiny.yaml's shape, a config with errors in every section,
// and one with flow style and anchors, so the fuzzer starts from what users write.
#include <cstdio>
#include <string>

namespace {

bool write(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

constexpr const char* kTiny = R"(model:
  n_layer: 2
  n_head: 4
  n_embd: 64
  block_size: 128
  vocab_size: 50257
train:
  batch: 4
  seq: 64
  max_steps: 100
  lr: 6.0e-4
  min_lr: 6.0e-5
  warmup_steps: 10
data:
  train: data/sotu/train
  val: data/sotu/val
)";

constexpr const char* kBad = R"(model: {n_layer: six, n_head: 3, n_embd: 64, block_size: 0}
train: {lr: 5, beta1: 1.0, batch: -1, unknown: x}
data: [a, b]
)";

constexpr const char* kFlow = R"(defaults: &d {n_layer: 1, n_head: 1, n_embd: 8}
model: {<<: *d, block_size: 16, vocab_size: 256}
train: {batch: 1, seq: 8, max_steps: 1}
data: {train: "x"}
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  const bool ok = write(dir + "/tiny.yaml", kTiny) && write(dir + "/bad.yaml", kBad) &&
                  write(dir + "/flow.yaml", kFlow);
  return ok ? 0 : 1;
}
