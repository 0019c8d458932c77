// Seeds for fuzz/decode_input: what `kiln encode` prints, an empty array, the edges of the id
// range and a nested array, so the fuzzer starts from the grammar's corners.
#include <cstdio>
#include <string>

namespace {

bool write(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  const bool ok = write(dir + "/sentence", "[464, 2068, 7586, 21831, 18045, 625, 262, 16931]") &&
                  write(dir + "/empty", " [ ]\n") &&
                  write(dir + "/edges", "[0,50256,\n4294967295]") &&
                  write(dir + "/nested", "[[1],[2,[3]]]");
  return ok ? 0 : 1;
}
