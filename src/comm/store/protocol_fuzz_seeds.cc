// Writes seed inputs for the store_protocol fuzz target: one valid frame of every request type
// and a few responses, encoded by the current encoder so the seeds never go stale.
//
//   protocol_fuzz_seeds <dir>      writes <dir>/<name>.bin for each seed; exit 1 on any failure
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "comm/store/protocol.h"

namespace {

using kiln::comm::store::Response;

Response response(kiln::StatusCode code, std::string message, std::string value, int64_t number) {
  Response r;
  r.code = code;
  r.message = std::move(message);
  r.value = std::move(value);
  r.number = number;
  return r;
}

std::vector<std::pair<std::string, std::string>> seeds() {
  using namespace kiln::comm::store;
  return {
      {"set", encode_request(set_request("job/7/rank/0/addr", "10.0.0.1:29500"))},
      {"set_binary", encode_request(set_request("k", std::string("\0\xff", 2)))},
      {"get", encode_request(get_request("job/7/rank/1/addr", 5000))},
      {"wait", encode_request(wait_request({"a", "bb", "ccc"}, 100))},
      {"wait_none", encode_request(wait_request({}, 0))},
      {"add", encode_request(add_request("barrier/3", -2))},
      {"cas", encode_request(cas_request("generation", "7", "8"))},
      {"delete", encode_request(delete_request("job/7/rank/0/addr"))},
      {"ok", encode_response(response(kiln::StatusCode::kOk, "", "10.0.0.1:29500", 0))},
      {"add_result", encode_response(response(kiln::StatusCode::kOk, "", "", 42))},
      {"timeout", encode_response(response(kiln::StatusCode::kTimeout,
                                           "store get: key 'x' not set after 5 ms", "", 0))},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <seed-dir>\n", argv[0]);
    return 2;
  }
  for (const auto& [name, bytes] : seeds()) {
    const std::string path = std::string(argv[1]) + "/" + name + ".bin";
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file.good()) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
