// TensorView: a non-owning view of a dense array (pointer, shape, strides, dtype).
//
// kiln_ops has no autograd engine and no tensor library: kernels come in explicit
// forward/backward pairs (as in llm.c) over views of buffers the caller owns. A view only says
// where the numbers are; every op checks the views it is given (rank, shape, dtype, and the
// strides its kernel needs) and reports a mismatch as kInvalidArgument naming the operand.
//
// Strides are in elements, not bytes. A view with data == nullptr is "absent" (optional
// operands such as a bias).
#ifndef KILN_OPS_TENSOR_H_
#define KILN_OPS_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <kiln/base/check.h>

namespace kiln::ops {

enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,  // storage only: kernels compute in fp32
  kI32 = 2,   // token ids, targets
};

size_t dtype_bytes(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", "i32"

inline constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // elements

  // A contiguous (row-major) view.
  static TensorView of(void* data, DType dtype, std::initializer_list<int64_t> shape);
  static TensorView f32(float* data, std::initializer_list<int64_t> shape) {
    return of(data, DType::kF32, shape);
  }
  static TensorView i32(int32_t* data, std::initializer_list<int64_t> shape) {
    return of(data, DType::kI32, shape);
  }
  // A view with explicit strides (elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> stride);

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  bool contiguous() const;
  int64_t size(int dim) const { return shape[dim]; }

  // Typed access. REQUIRES: the dtype matches (KILN_CHECK).
  float* f32_ptr() const {
    KILN_CHECK(dtype == DType::kF32) << "view is " << dtype_name(dtype) << ", not f32";
    return static_cast<float*>(data);
  }
  int32_t* i32_ptr() const {
    KILN_CHECK(dtype == DType::kI32) << "view is " << dtype_name(dtype) << ", not i32";
    return static_cast<int32_t*>(data);
  }
  uint16_t* bf16_ptr() const {
    KILN_CHECK(dtype == DType::kBF16) << "view is " << dtype_name(dtype) << ", not bf16";
    return static_cast<uint16_t*>(data);
  }

  // "f32[8,256,384]" (with "strides [...]" when not contiguous).
  std::string describe() const;
};

}  // namespace kiln::ops

#endif  // KILN_OPS_TENSOR_H_
