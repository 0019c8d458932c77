// libFuzzer target for the safetensors reader (SafetensorsFile::from_bytes), built by
// kiln_fuzz_target (KilnFuzz.cmake). Checkpoint shards and exported weights are read with it.
//
// Whatever opens must keep the reader's invariants: every tensor's bytes lie inside the input,
// have numel * dtype size bytes, and the tensors tile the data section in order. Refusals must be
// kCorruption. A violation is a KILN_CHECK failure, recorded as a crash; so is a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <kiln/base/check.h>
#include <kiln/ckpt/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  kiln::Result<kiln::ckpt::SafetensorsFile> file =
      kiln::ckpt::SafetensorsFile::from_bytes("fuzz.safetensors", std::move(bytes));
  if (!file.ok()) {
    KILN_CHECK(file.status().is_corruption()) << file.status().to_string();
    return 0;
  }
  const std::byte* end = nullptr;
  for (const kiln::ckpt::TensorEntry& t : file->tensors()) {
    const int64_t numel = kiln::ckpt::shape_numel(t.shape);
    KILN_CHECK(numel >= 0);
    KILN_CHECK_EQ(t.bytes.size(), static_cast<uint64_t>(numel) * kiln::ckpt::dtype_size(t.dtype));
    KILN_CHECK(end == nullptr || t.bytes.data() == end) << "tensors do not tile the data";
    end = t.bytes.data() + t.bytes.size();
    KILN_CHECK(file->get(t.name).ok());
  }
  return 0;
}
