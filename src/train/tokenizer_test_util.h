// Test helpers shared by the tokenizer tests: where GPT-2's files and the SOTU corpus live.
//
// The data is fetched, not checked in (scripts/fetch-data; scripts/test runs it first). A test
// that needs it and finds it missing fails with "run scripts/fetch-data", never skips.
#ifndef KILN_TRAIN_TOKENIZER_TEST_UTIL_H_
#define KILN_TRAIN_TOKENIZER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::train::tok::testing {

inline std::string data_path(const std::string& relative) {
  return std::string(KILN_SOURCE_DIR) + "/data/" + relative;
}

inline const std::string& encoder_path() {
  static const std::string path = data_path("gpt2/encoder.json");
  return path;
}

inline const std::string& vocab_path() {
  static const std::string path = data_path("gpt2/vocab.bpe");
  return path;
}

// Adds a failure naming the file when it is missing.
inline bool have_data(const std::string& path) {
  if (std::filesystem::exists(path)) return true;
  ADD_FAILURE() << path << " is missing: run scripts/fetch-data";
  return false;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every file of data/sotu/raw/train/ then data/sotu/raw/val/, each sorted by name (the order
// of tokenizer_reference.py's digest). Empty (after a failure) when the corpus is missing.
inline std::vector<std::string> sotu_files() {
  std::vector<std::string> all;
  for (const char* split : {"train", "val"}) {
    const std::string dir = data_path(std::string("sotu/raw/") + split);
    if (!have_data(dir)) return {};
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() == ".txt") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    all.insert(all.end(), files.begin(), files.end());
  }
  return all;
}

}  // namespace kiln::train::tok::testing

#endif  // KILN_TRAIN_TOKENIZER_TEST_UTIL_H_
