// Seeds for fuzz/token_shard: shards written by write_shard (empty, a few tokens, the largest id).
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/train/shard.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  const std::vector<uint16_t> few = {50256, 0, 1, 2, 464, 262, 65535};
  const bool ok = kiln::train::write_shard(dir + "/empty.bin", {}).ok() &&
                  kiln::train::write_shard(dir + "/few.bin", few).ok();
  return ok ? 0 : 1;
}
