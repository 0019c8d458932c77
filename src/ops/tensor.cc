// See include/kiln/ops/tensor.h.
#include <kiln/ops/tensor.h>

#include <array>

namespace kiln::ops {
namespace {
constexpr std::array<std::string_view, 3> kNames = {"f32", "bf16", "i32"};
constexpr std::array<size_t, 3> kBytes = {4, 2, 4};
}  // namespace

size_t dtype_bytes(DType dtype) {
  return kBytes[static_cast<int>(dtype)];
}
std::string_view dtype_name(DType dtype) {
  return kNames[static_cast<int>(dtype)];
}

TensorView TensorView::of(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  KILN_CHECK_LE(shape.size(), static_cast<size_t>(kMaxDims));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape)
    t.shape[d++] = s;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.stride[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> stride) {
  KILN_CHECK_EQ(shape.size(), stride.size());
  TensorView t = of(data, dtype, shape);
  int d = 0;
  for (int64_t s : stride)
    t.stride[d++] = s;
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d)
    n *= shape[d];
  return n;
}

bool TensorView::contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::string TensorView::describe() const {
  std::string s(dtype_name(dtype));
  s += "[";
  for (int d = 0; d < ndim; ++d)
    s += (d ? "," : "") + std::to_string(shape[d]);
  s += "]";
  if (!contiguous()) {
    s += " strides [";
    for (int d = 0; d < ndim; ++d)
      s += (d ? "," : "") + std::to_string(stride[d]);
    s += "]";
  }
  return s;
}

}  // namespace kiln::ops
