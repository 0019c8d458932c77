// See validate.h.
#include "ops/validate.h"

#include <string>

namespace kiln::ops {
namespace {

std::string wanted(DType dtype, std::initializer_list<int64_t> shape) {
  std::string s(dtype_name(dtype));
  s += "[";
  bool first = true;
  for (int64_t d : shape) {
    s += (first ? "" : ",") + (d < 0 ? std::string("*") : std::to_string(d));
    first = false;
  }
  return s + "]";
}

}  // namespace

Status expect_present(const char* op, const char* name, const TensorView& t) {
  if (t.present()) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " is missing");
}

Status expect_shape(const char* op, const char* name, const TensorView& t, DType dtype,
                    std::initializer_list<int64_t> shape) {
  KILN_RETURN_IF_ERROR(expect_present(op, name, t));
  bool ok = t.dtype == dtype && t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (ok && s >= 0 && t.shape[d] != s) ok = false;
    if (ok && t.shape[d] < 0) ok = false;
    ++d;
  }
  if (ok) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                  " but must be " + wanted(dtype, shape));
}

Status expect_unit_inner_stride(const char* op, const char* name, const TensorView& t) {
  if (t.ndim == 0 || t.stride[t.ndim - 1] == 1) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() +
                                  ") needs a unit stride in its last dimension");
}

Status expect_contiguous(const char* op, const char* name, const TensorView& t) {
  if (t.contiguous()) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() +
                                  ") must be contiguous");
}

namespace {

// [lowest byte, one past the highest byte] of a view's elements, whatever the strides' signs;
// empty for an empty view.
struct ByteSpan {
  uintptr_t begin = 0, end = 0;
};
ByteSpan byte_span(const TensorView& t) {
  ByteSpan span;
  if (t.data == nullptr || t.numel() == 0) return span;
  int64_t lowest = 0, highest = 0;  // element offsets from data
  for (int d = 0; d < t.ndim; ++d) {
    const int64_t reach = (t.shape[d] - 1) * t.stride[d];
    (reach < 0 ? lowest : highest) += reach;
  }
  const auto bytes = static_cast<int64_t>(dtype_bytes(t.dtype));
  const auto base = reinterpret_cast<uintptr_t>(t.data);
  span.begin = base - static_cast<uintptr_t>(-lowest * bytes);
  span.end = base + static_cast<uintptr_t>((highest + 1) * bytes);
  return span;
}

}  // namespace

Status expect_disjoint(const char* op, const char* name, const TensorView& t,
                       const char* other_name, const TensorView& other) {
  const ByteSpan a = byte_span(t), b = byte_span(other);
  if (a.begin == a.end || b.begin == b.end || a.end <= b.begin || b.end <= a.begin) {
    return Status();
  }
  return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() +
                                  ") overlaps " + other_name + " (" + other.describe() + ")");
}

Status expect_same_numel(const char* op, const char* name, const TensorView& t, int64_t numel) {
  KILN_RETURN_IF_ERROR(expect_present(op, name, t));
  if (t.numel() == numel) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() + ") has " +
                                  std::to_string(t.numel()) + " elements, expected " +
                                  std::to_string(numel));
}

}  // namespace kiln::ops
