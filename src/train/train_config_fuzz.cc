// libFuzzer target for the trainer's YAML config (load_train_config: yaml-cpp, ConfigReader and
// the rules across keys), built by kiln_fuzz_target (KilnFuzz.cmake).
//
// load_train_config takes a path, so each input is written to one temporary file first. It must
// return a config whose rules across keys hold, or an error naming the file; it must never throw,
// crash, or run out of stack. A violation is a KILN_CHECK failure, recorded as a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <kiln/base/check.h>
#include <kiln/train/train_config.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      "/tmp/kiln_train_config_fuzz_" + std::to_string(::getpid()) + ".yaml";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  KILN_CHECK(f != nullptr) << path;
  KILN_CHECK_EQ(std::fwrite(data, 1, size, f), size);
  KILN_CHECK_EQ(std::fclose(f), 0);
  kiln::Result<kiln::train::TrainConfig> config = kiln::train::load_train_config(path);
  if (!config.ok()) {
    KILN_CHECK(config.status().message().find(path) != std::string::npos)
        << "an error that does not name the file: " << config.status().to_string();
    return 0;
  }
  // The rule across keys that a range cannot say must have held.
  KILN_CHECK(config->model.n_head > 0 && config->model.n_embd % config->model.n_head == 0);
  return 0;
}
