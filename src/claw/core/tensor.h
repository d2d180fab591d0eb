// Tensor: a non-owning, contiguous, row-major view (pointer, dtype, shape).
// Storage is owned elsewhere (an Arena, a mmap); a Tensor never frees.
// Kernels take raw pointers and int64_t shapes; Tensor is the currency of the
// model, optimizer and checkpoint layers, where names and shapes matter.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "claw/core/dtype.h"
#include "claw/core/error.h"

namespace claw {

class Shape {
 public:
  static constexpr int kMaxDims = 5;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    CLAW_CHECK(dims.size() <= kMaxDims);
    for (int64_t d : dims) dims_[ndim_++] = d;
  }
  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + ndim_ : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[i];
    return n;
  }
  // This shape with dimension `dim` set to `size`.
  Shape with(int dim, int64_t size) const {
    Shape s = *this;
    s.dims_[dim < 0 ? dim + ndim_ : dim] = size;
    return s;
  }
  bool operator==(const Shape& o) const {
    if (ndim_ != o.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < ndim_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(shape) {}

  void* raw() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr; }

  template <typename T>
  T* data() const {
    CLAW_CHECK(dtype_ == dtype_of<T>::value, "tensor is {}, accessed as {}", dtype_name(dtype_),
               dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
};

}  // namespace claw
