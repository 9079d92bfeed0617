#pragma once
// Tensor: a contiguous, row-major N-D array (NCHW for images) of f32, f64 or
// bf16 on one device. Copies of a Tensor share storage; clone() deep-copies.
// bf16 is a storage type (plexus/bfloat16.h): kernels compute in f32 or f64,
// and layers, nets and checkpoints take f32 or f64 tensors.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/error.h"

namespace plexus {

enum class DType { f32, f64, bf16 };

// The element of a DType::bf16 tensor: the upper 16 bits of an f32
// (plexus/bfloat16.h converts).
struct BFloat16 {
  std::uint16_t bits;
};

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}

// Runs `fn` with a value of the element type of `dtype` (float, double or
// BFloat16): dispatch_element(t.dtype(), [&](auto zero) { using T = decltype(zero); ... }).
// Kernels that compute take dispatch_float (plexus/layer.h), which refuses bf16.
template <typename Fn>
decltype(auto) dispatch_element(DType dtype, Fn&& fn) {
  if (dtype == DType::bf16) return fn(BFloat16{});
  if (dtype == DType::f64) return fn(double{0});
  return fn(float{0});
}

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  std::string str() const;  // "cpu" or "cuda:0"
  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

// Parses "cpu", "cuda", "cuda:1" or "auto" (CUDA when a GPU is present).
Device parse_device(const std::string& text);

using Shape = std::vector<std::int64_t>;
// The product of the dimensions; ShapeError when it overflows 64 bits.
std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[16, 3, 256, 256]"

// The largest tensor, in bytes, that Tensor's constructor allocates
// (default: limits::kMaxTensorElements f64 elements). A larger request is a
// ShapeError naming the shape, before any allocation. Fuzzers lower it.
std::size_t max_tensor_bytes();
void set_max_tensor_bytes(std::size_t bytes);

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled tensor. ShapeError for a negative dimension, more
  // than limits::kMaxTensorElements elements or more than max_tensor_bytes().
  explicit Tensor(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());

  // Host values (converted to dtype) copied onto device.
  static Tensor from_values(const std::vector<double>& values, Shape shape, DType dtype = DType::f32,
                            Device device = Device::cpu());
  // A host copy of every element, as f64. For tests and small reductions.
  std::vector<double> to_values() const;

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int axis) const;  // negative axes count from the end
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::string describe() const;  // "f32[2, 3] on cpu"

  void* raw_data();
  const void* raw_data() const;
  // Typed access; throws when T does not match dtype().
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw_data());
  }

  Tensor to(Device device) const;  // a copy on another device (shares when same)
  Tensor to(DType dtype) const;    // a converted copy (shares when same)
  Tensor clone() const;
  void fill_zero();
  // Copies src (same shape and dtype, any device) into this tensor.
  void copy_from(const Tensor& src);
  // The same storage seen with another shape of equal element count.
  Tensor reshaped(Shape shape) const;
  // A tensor of `shape` over elements [first, first + numel(shape)) of this
  // one, sharing its storage (writes through either are seen by both; the
  // storage lives while either does). ShapeError when they do not fit.
  Tensor elements_view(std::int64_t first, Shape shape) const;

 private:
  void check_type(DType requested) const;
  struct Storage;
  std::shared_ptr<Storage> storage_;
  std::size_t byte_offset_ = 0;  // where this tensor's elements start in the storage
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

// Every tensor set to zero, as Tensor::fill_zero on each, in one kernel
// launch per device for up to 64 CUDA tensors: a CUDA graph then holds one
// node where a memset each would be a chain of nodes run one after another.
// Error naming a null entry (before anything is zeroed).
void fill_zero(const std::vector<Tensor*>& tensors);

}  // namespace plexus
