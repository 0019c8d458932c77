// Seeds for fuzz/safetensors: files written by write_safetensors (no tensor; three tensors of
// different dtypes with metadata), so the fuzzer starts from what real shards look like.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/ckpt/safetensors.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  const std::vector<float> weights = {1.0f, -2.0f, 3.5f, 0.0f, 8.0f, 1e-3f};
  const std::vector<int64_t> step = {42};
  const std::vector<uint8_t> rng = {1, 2, 3, 4, 5};
  const std::vector<kiln::ckpt::TensorRef> tensors = {
      {"weights", kiln::ckpt::DType::kF32, {2, 3}, weights.data()},
      {"step", kiln::ckpt::DType::kI64, {1}, step.data()},
      {"rng", kiln::ckpt::DType::kU8, {5}, rng.data()}};
  const bool ok = kiln::ckpt::write_safetensors(dir + "/empty", {}, {}).ok() &&
                  kiln::ckpt::write_safetensors(dir + "/three", tensors,
                                                {{"format", "kiln-gpt2"}, {"n_layer", "2"}})
                      .ok();
  return ok ? 0 : 1;
}
