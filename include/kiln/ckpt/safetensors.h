// Safetensors files: the tensor container Kiln exports weights in and writes checkpoint shards
// as, readable by the `safetensors` library and by a few lines of plain Python.
//
// Layout (https://github.com/huggingface/safetensors, "format"):
//   bytes [0, 8)      N, the header length, u64 little-endian
//   bytes [8, 8 + N)  a JSON object: for each tensor
//                       "name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
//                     and optionally "__metadata__": {string: string}; padded with spaces so the
//                     data starts 8-byte aligned
//   bytes [8 + N, ..) the tensors' data, little-endian, row-major; offsets are relative to here
//
// Invariants a reader checks (SafetensorsFile::open): the header fits the file, is a JSON object,
// every entry has a known dtype, a non-negative shape and offsets with end - begin equal to
// numel * dtype size, entries do not overlap and together cover the data section exactly.
#ifndef KILN_CKPT_SAFETENSORS_H_
#define KILN_CKPT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/file_system.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::ckpt {

enum class DType { kF32, kBF16, kI32, kI64, kU8 };

// "F32", "BF16", "I32", "I64", "U8": the names the format uses.
std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);
// The number of elements of `shape`, or -1 when a dimension is negative or the product overflows.
int64_t shape_numel(std::span<const int64_t> shape);

// A tensor to write: `data` points at numel(shape) * dtype_size(dtype) bytes.
struct TensorRef {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// The bytes of a file before its tensors' data: the 8-byte length, the JSON header ("__metadata__"
// first when `metadata` is not empty, then `tensors` in order, offsets back to back) padded with
// spaces to a multiple of 8. kInvalidArgument, prefixed with `what` (a file name), for a
// reserved or duplicate name, a negative shape or missing data. `data_bytes` (may be null) gets
// the size of the data section that must follow.
Result<std::string> encode_safetensors_header(std::span<const TensorRef> tensors,
                                              const std::map<std::string, std::string>& metadata,
                                              const std::string& what, uint64_t* data_bytes);

// Writes `path` with `tensors` in the given order and `metadata` as "__metadata__", through `fs`
// by kiln's durable-write protocol (write_file_durably in kiln/base/file_system.h: `path`.tmp,
// fsync, rename, directory fsync), so a crash leaves either the old file or the new one. Names
// must be unique and not "__metadata__". Errors name the file and the call that failed.
Status write_safetensors(const std::string& path, std::span<const TensorRef> tensors,
                         const std::map<std::string, std::string>& metadata = {},
                         FileSystem* fs = posix_file_system());

struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // into the SafetensorsFile that returned it
};

// A safetensors file read whole into memory, its header validated.
class SafetensorsFile {
 public:
  // kIoError when the file cannot be read, kCorruption naming the file and the field when its
  // header is wrong (truncated, bad JSON, unknown dtype, offsets out of range or inconsistent).
  static Result<SafetensorsFile> open(const std::string& path);
  // The same validation on a file's bytes already in memory; `path` names it in errors.
  static Result<SafetensorsFile> from_bytes(std::string path, std::vector<std::byte> contents);

  // Movable (entries keep pointing into the moved buffer), not copyable.
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }  // in file (offset) order
  // kNotFound naming the file and the tensor.
  Result<TensorEntry> get(std::string_view name) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::vector<std::byte> contents_;  // the whole file; entries point into it
  std::map<std::string, std::string> metadata_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace kiln::ckpt

#endif  // KILN_CKPT_SAFETENSORS_H_
