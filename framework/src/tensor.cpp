#include "plexus/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <sstream>
#include <utility>

#include "backend.h"
#include "element_values.h"
#include "plexus/checked_math.h"

namespace plexus {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
  }
  throw Error("dtype_size: not a DType (" + std::to_string(static_cast<int>(dtype)) + ")");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
  }
  throw Error("dtype_name: not a DType (" + std::to_string(static_cast<int>(dtype)) + ")");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "auto") return device_memory::cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (text.size() > 5) {
      char* end = nullptr;
      long parsed = std::strtol(text.c_str() + 5, &end, 10);
      if (*end != '\0' || parsed < 0)
        throw ConfigError("bad device '" + text + "': expected cpu, cuda, cuda:N or auto");
      index = static_cast<int>(parsed);
    }
    if (!device_memory::built_with_cuda())
      throw DeviceError("device '" + text + "' requested, but this Plexus was built without CUDA; use --device cpu");
    int count = device_memory::cuda_device_count();
    if (index >= count)
      throw DeviceError("device '" + text + "' requested, but " + std::to_string(count) +
                        " CUDA GPU(s) are visible; use --device cpu or auto");
    return Device::cuda(index);
  }
  throw ConfigError("unknown device '" + text + "': expected cpu, cuda, cuda:N or auto");
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape)
    if (__builtin_mul_overflow(n, d, &n))  // the message is built only on overflow: numel() is hot
      throw ShapeError("the element count of shape " + shape_str(shape) + " does not fit in 64 bits");
  return n;
}

namespace {
std::atomic<std::size_t> max_tensor_bytes_setting{static_cast<std::size_t>(limits::kMaxTensorElements) * 8};
}  // namespace

std::size_t max_tensor_bytes() { return max_tensor_bytes_setting.load(); }
void set_max_tensor_bytes(std::size_t bytes) { max_tensor_bytes_setting.store(bytes); }

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

struct Tensor::Storage {
  void* pointer = nullptr;
  Device device;
  Storage(std::size_t bytes, Device device_) : pointer(device_memory::allocate(bytes, device_)), device(device_) {}
  ~Storage() { device_memory::release(pointer, device); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

Tensor::Tensor(Shape shape, DType dtype, Device device) : shape_(std::move(shape)), dtype_(dtype), device_(device) {
  for (auto d : shape_)
    if (d < 0) throw ShapeError("cannot create a tensor of negative shape " + shape_str(shape_));
  const std::int64_t elements = shape_numel(shape_);
  if (elements > limits::kMaxTensorElements)
    throw ShapeError("cannot create a tensor of shape " + shape_str(shape_) + ": " + std::to_string(elements) +
                     " elements, more than the limit of " + std::to_string(limits::kMaxTensorElements));
  const std::size_t bytes = static_cast<std::size_t>(elements) * dtype_size(dtype_);
  if (bytes > max_tensor_bytes())
    throw ShapeError("cannot create a tensor of shape " + shape_str(shape_) + " (" + dtype_name(dtype_) + "): " +
                     std::to_string(bytes) + " bytes, more than the limit of " + std::to_string(max_tensor_bytes()));
  try {
    storage_ = std::make_shared<Storage>(bytes, device_);
  } catch (const std::bad_alloc&) {
    throw Error("out of memory allocating a tensor of shape " + shape_str(shape_) + " (" + std::to_string(bytes) +
                " bytes) on " + device_.str());
  }
  // Host memory comes zeroed, and a large tensor's pages only when written (plexus/host_memory.h).
  if (!device_.is_cpu()) device_memory::fill_zero(storage_->pointer, nbytes(), device_);
}

Tensor Tensor::from_values(const std::vector<double>& values, Shape shape, DType dtype, Device device) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape))
    throw ShapeError("from_values: " + std::to_string(values.size()) + " values do not fill shape " + shape_str(shape));
  Tensor host(std::move(shape), dtype, Device::cpu());
  dispatch_element(dtype, [&](auto zero) {
    auto* out = host.data<decltype(zero)>();
    for (std::size_t i = 0; i < values.size(); ++i) store_element(out[i], values[i]);
  });
  return host.to(device);
}

std::vector<double> Tensor::to_values() const {
  if (!defined()) return {};
  Tensor host = to(Device::cpu());
  std::vector<double> values(static_cast<std::size_t>(numel()));
  dispatch_element(dtype_, [&](auto zero) {
    const auto* in = host.data<decltype(zero)>();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = element_value(in[i]);
  });
  return values;
}

std::int64_t Tensor::dim(int axis) const {
  int n = ndim();
  int a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n)
    throw ShapeError("axis " + std::to_string(axis) + " out of range for shape " + shape_str(shape_));
  return shape_[static_cast<std::size_t>(a)];
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device_.str();
}

void* Tensor::raw_data() {
  if (!defined()) throw Error("access to the data of an undefined tensor");
  return static_cast<char*>(storage_->pointer) + byte_offset_;
}
const void* Tensor::raw_data() const {
  if (!defined()) throw Error("access to the data of an undefined tensor");
  return static_cast<const char*>(storage_->pointer) + byte_offset_;
}

void Tensor::check_type(DType requested) const {
  if (requested != dtype_) throw Error(std::string("tensor ") + describe() + " accessed as " + dtype_name(requested));
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor result(shape_, dtype_, device);
  device_memory::copy(result.raw_data(), device, raw_data(), device_, nbytes());
  return result;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  return from_values(to_values(), shape_, dtype, device_);
}

Tensor Tensor::clone() const {
  Tensor result(shape_, dtype_, device_);
  result.copy_from(*this);
  return result;
}

void Tensor::fill_zero() { device_memory::fill_zero(raw_data(), nbytes(), device_); }

void fill_zero(const std::vector<Tensor*>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i])
      throw Error("fill_zero: tensor " + std::to_string(i) + " of " + std::to_string(tensors.size()) + " is null");
  std::vector<Device> devices;
  for (const Tensor* t : tensors)
    if (std::find(devices.begin(), devices.end(), t->device()) == devices.end()) devices.push_back(t->device());
  for (const Device& device : devices) {
    std::vector<device_memory::ByteSpan> spans;
    for (Tensor* t : tensors)
      if (t->device() == device) spans.push_back({t->raw_data(), t->nbytes()});
    device_memory::fill_zero(spans, device);
  }
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_ || src.dtype_ != dtype_)
    throw ShapeError("copy_from: cannot copy " + src.describe() + " into " + describe());
  device_memory::copy(raw_data(), device_, src.raw_data(), src.device_, nbytes());
}

Tensor Tensor::elements_view(std::int64_t first, Shape shape) const {
  for (auto d : shape)
    if (d < 0) throw ShapeError("elements_view: negative shape " + shape_str(shape));
  const std::int64_t count = shape_numel(shape);
  if (!defined() || first < 0 || first > numel() || count > numel() - first)
    throw ShapeError("elements_view: elements [" + std::to_string(first) + ", " + std::to_string(first) + " + " +
                     std::to_string(count) + ") are not within " + describe());
  Tensor view = *this;
  view.byte_offset_ = byte_offset_ + static_cast<std::size_t>(first) * dtype_size(dtype_);
  view.shape_ = std::move(shape);
  return view;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel()) throw ShapeError("cannot reshape " + describe() + " to " + shape_str(shape));
  Tensor view = *this;
  view.shape_ = std::move(shape);
  return view;
}

}  // namespace plexus
