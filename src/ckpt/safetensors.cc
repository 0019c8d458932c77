// Safetensors writing and reading (see include/kiln/ckpt/safetensors.h for the layout).
#include <kiln/ckpt/safetensors.h>

#include <kiln/base/json.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kiln/base/endian.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::ckpt {
namespace {

constexpr size_t kHeaderLengthBytes = 8;
// Data starts 8-byte aligned so a reader can view f32/i64 tensors in place.
constexpr size_t kDataAlignment = 8;
// A header larger than this is a corrupt length field, not a real file (the format's own
// readers refuse headers above 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// The header is {name: {"shape": [...], ...}, "__metadata__": {key: string}}: 3 levels. A little
// more is tolerated so the structural checks, not the depth bound, name a misplaced value.
constexpr int kHeaderDepthMax = 8;

struct DTypeName {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {{DType::kF32, "F32", 4},
                                 {DType::kBF16, "BF16", 2},
                                 {DType::kI32, "I32", 4},
                                 {DType::kI64, "I64", 8},
                                 {DType::kU8, "U8", 1}};

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

size_t dtype_size(DType dtype) {
  for (const DTypeName& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

Result<std::string> encode_safetensors_header(std::span<const TensorRef> tensors,
                                              const std::map<std::string, std::string>& metadata,
                                              const std::string& what, uint64_t* data_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return Status::invalid_argument(what + ": tensor name '" + t.name +
                                      "' is reserved or used twice");
    }
    const int64_t numel = shape_numel(t.shape);
    if (numel < 0 || dtype_size(t.dtype) == 0) {
      return Status::invalid_argument(what + ": tensor '" + t.name +
                                      "' has an invalid shape or dtype");
    }
    if (numel > 0 && t.data == nullptr) {
      return Status::invalid_argument(what + ": tensor '" + t.name + "' has no data");
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  const size_t padded =
      (kHeaderLengthBytes + text.size() + kDataAlignment - 1) / kDataAlignment * kDataAlignment -
      kHeaderLengthBytes;
  text.append(padded - text.size(), ' ');
  std::string out(kHeaderLengthBytes, '\0');
  encode_u64_le(text.size(), out.data());
  out += text;
  if (data_bytes != nullptr) *data_bytes = offset;
  return out;
}

Status write_safetensors(const std::string& path, std::span<const TensorRef> tensors,
                         const std::map<std::string, std::string>& metadata, FileSystem* fs) {
  KILN_ASSIGN_OR_RETURN(std::string header,
                        encode_safetensors_header(tensors, metadata, path, nullptr));
  std::vector<ByteSpan> spans;
  spans.reserve(tensors.size() + 1);
  spans.push_back({header.data(), header.size()});
  for (const TensorRef& t : tensors) {
    const size_t bytes = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    if (bytes > 0) spans.push_back({t.data, bytes});
  }
  return write_file_durably(fs, path, spans).status();
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::vector<std::byte> contents;
  // O_NONBLOCK so that a FIFO cannot block the open; it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::io_error(path + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::io_error(path + ": cannot stat: " + errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::corruption(path + ": not a regular file (a directory, FIFO or device)");
  }
  contents.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::read(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Status::io_error(path + ": read failed at byte " + std::to_string(done) + ": " +
                              (n == 0 ? std::string("unexpected end of file") : errno_text()));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return from_bytes(path, std::move(contents));
}

Result<SafetensorsFile> SafetensorsFile::from_bytes(std::string path,
                                                    std::vector<std::byte> contents) {
  SafetensorsFile file;
  file.path_ = std::move(path);
  file.contents_ = std::move(contents);
  const std::string& path_ref = file.path_;
  const size_t size = file.contents_.size();
  if (size < kHeaderLengthBytes) {
    return Status::corruption(path_ref + ": " + std::to_string(size) +
                              " bytes, shorter than the 8-byte header length");
  }
  const uint64_t header_bytes = decode_u64_le(file.contents_.data());
  if (header_bytes > kMaxHeaderBytes || header_bytes > size - kHeaderLengthBytes) {
    return Status::corruption(path_ref + ": header length " + std::to_string(header_bytes) +
                              " does not fit the file's " + std::to_string(size) + " bytes");
  }
  const char* text = reinterpret_cast<const char*>(file.contents_.data() + kHeaderLengthBytes);
  Result<nlohmann::json> parsed =
      parse_json_bounded(std::string_view(text, header_bytes), {kMaxHeaderBytes, kHeaderDepthMax},
                         path_ref + ": header", StatusCode::kCorruption);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json header = std::move(*parsed);
  if (!header.is_object()) return Status::corruption(path_ref + ": header is not a JSON object");
  const std::byte* data = file.contents_.data() + kHeaderLengthBytes + header_bytes;
  const uint64_t data_bytes = size - kHeaderLengthBytes - header_bytes;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return Status::corruption(path_ref + ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) {
          return Status::corruption(path_ref + ": __metadata__." + m.key() + " is not a string");
        }
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = path_ref + ": tensor '" + name + "'";
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2) {
      return Status::corruption(where + ": needs dtype, shape and two data_offsets");
    }
    TensorEntry entry;
    entry.name = name;
    const std::string dtype = e["dtype"].get<std::string>();
    const DTypeName* known = nullptr;
    for (const DTypeName& d : kDTypes) {
      if (d.name == dtype) known = &d;
    }
    if (known == nullptr) return Status::corruption(where + ": unsupported dtype " + dtype);
    entry.dtype = known->dtype;
    for (const nlohmann::json& d : e["shape"]) {
      if (!d.is_number_integer()) return Status::corruption(where + ": shape is not integers");
      entry.shape.push_back(d.get<int64_t>());
    }
    const int64_t numel = shape_numel(entry.shape);
    const nlohmann::json& offsets = e["data_offsets"];
    if (numel < 0 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return Status::corruption(where + ": invalid shape or data_offsets");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_bytes ||
        end - begin != static_cast<uint64_t>(numel) * known->size) {
      return Status::corruption(where + ": data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") do not hold its shape within the " +
                                std::to_string(data_bytes) + " data bytes");
    }
    entry.bytes = std::span<const std::byte>(data + begin, end - begin);
    file.tensors_.push_back(std::move(entry));
  }
  // Entries must tile the data section: sorted by offset, each starts where the previous ended.
  std::sort(
      file.tensors_.begin(), file.tensors_.end(),
      [](const TensorEntry& a, const TensorEntry& b) { return a.bytes.data() < b.bytes.data(); });
  const std::byte* expected = data;
  for (const TensorEntry& t : file.tensors_) {
    if (t.bytes.data() != expected) {
      return Status::corruption(path_ref + ": tensor '" + t.name +
                                "' does not start where the previous one ends (overlap or gap)");
    }
    expected += t.bytes.size();
  }
  if (expected != data + data_bytes) {
    return Status::corruption(path_ref + ": " + std::to_string(data + data_bytes - expected) +
                              " bytes after the last tensor");
  }
  return file;
}

Result<TensorEntry> SafetensorsFile::get(std::string_view name) const {
  for (const TensorEntry& t : tensors_) {
    if (t.name == name) return t;
  }
  return Status::not_found(path_ + ": no tensor '" + std::string(name) + "'");
}

}  // namespace kiln::ckpt
