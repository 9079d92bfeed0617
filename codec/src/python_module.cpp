// plexus.codec, the Python module (pybind11) over the C API (plexus/codec.h):
//   model = plexus.codec.Model(quality=3)            # or Model(path="model.safetensors", device="cuda")
//   data = model.compress(pixels)                     # H x W x 3 (or 4) uint8, any row stride -> bytes
//   pixels = model.decompress(data)                   # -> numpy.ndarray, H x W x 3 uint8
//   plexus.codec.info(data)                           # -> dict, without a model
// Arrays go through the buffer protocol (no NumPy C API, so any NumPy
// works): a C-contiguous or row-strided array is read in place, and
// decompress writes into the array it returns. A PyTorch tensor is taken
// through its .numpy() (on the CPU), without depending on PyTorch. Every
// failure raises plexus.codec.Error with the codec's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "plexus/codec.h"

namespace py = pybind11;

namespace {

// plexus.codec.Error, set when the module is initialised.
PyObject* codec_error = nullptr;

void check(plexus_codec_status status) {
  if (status != PLEXUS_CODEC_OK) {
    PyErr_SetString(codec_error, plexus_codec_last_error());
    throw py::error_already_set();
  }
}

// A buffer of `pixels`: an object with the buffer protocol, or a tensor
// offering .numpy() (PyTorch's, moved to the CPU first).
py::buffer as_buffer(const py::object& pixels) {
  if (PyObject_CheckBuffer(pixels.ptr())) return py::reinterpret_borrow<py::buffer>(pixels);
  if (py::hasattr(pixels, "numpy")) {
    py::object on_cpu = py::hasattr(pixels, "cpu") ? pixels.attr("detach")().attr("cpu")() : pixels;
    return on_cpu.attr("numpy")().cast<py::buffer>();
  }
  throw py::type_error("compress takes an H x W x 3 or H x W x 4 uint8 array (NumPy, a buffer, or a PyTorch tensor)");
}

class Model {
 public:
  Model(std::optional<double> quality, std::optional<std::string> path, const std::string& device,
        std::optional<double> level) {
    if (quality && path) throw py::value_error("give quality or path, not both");
    if (path) check(plexus_codec_open_file(path->c_str(), device.c_str(), &model_));
    else check(plexus_codec_open_quality(quality.value_or(3), device.c_str(), &model_));
    if (level) set_level(*level);
  }
  ~Model() { plexus_codec_close(model_); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  py::bytes compress(const py::object& pixels) {
    py::buffer buffer = as_buffer(pixels);
    py::buffer_info view = buffer.request();
    if (view.ndim != 3 || (view.shape[2] != 3 && view.shape[2] != 4) || view.itemsize != 1 || view.format != "B")
      throw py::value_error("compress takes an H x W x 3 or H x W x 4 uint8 array");
    const py::ssize_t channels = view.shape[2];
    if (view.strides[2] != 1 || view.strides[1] != channels || view.strides[0] < view.shape[1] * channels) {
      // Not rows of packed pixels: a packed copy.
      buffer = py::module_::import("numpy").attr("ascontiguousarray")(buffer).cast<py::buffer>();
      view = buffer.request();
    }
    std::uint8_t* file = nullptr;
    std::size_t size = 0;
    plexus_codec_status status;
    {
      py::gil_scoped_release released;
      const auto* data = static_cast<const std::uint8_t*>(view.ptr);
      const auto width = static_cast<std::uint32_t>(view.shape[1]), height = static_cast<std::uint32_t>(view.shape[0]);
      const auto stride = static_cast<std::size_t>(view.strides[0]);
      status = channels == 4 ? plexus_codec_encode_rgba(model_, data, width, height, stride, &file, &size)
                             : plexus_codec_encode_rgb(model_, data, width, height, stride, &file, &size);
    }
    check(status);
    py::bytes result(reinterpret_cast<const char*>(file), size);
    plexus_codec_free(file);
    return result;
  }

  py::object decompress(const py::buffer& data) {
    const py::buffer_info bytes = data.request();
    const auto* file = static_cast<const std::uint8_t*>(bytes.ptr);
    const auto size = static_cast<std::size_t>(bytes.size * bytes.itemsize);
    plexus_codec_info info{};
    check(plexus_codec_get_info(file, size, &info));
    py::object image = py::module_::import("numpy").attr("empty")(py::make_tuple(info.height, info.width, 3), "uint8");
    const py::buffer_info out = image.cast<py::buffer>().request(true);
    plexus_codec_status status;
    {
      py::gil_scoped_release released;
      status = plexus_codec_decode_rgb(model_, file, size, static_cast<std::uint8_t*>(out.ptr),
                                       static_cast<std::size_t>(out.size), std::size_t{info.width} * 3);
    }
    check(status);
    return image;
  }

  void set_level(double level) { check(plexus_codec_set_level(model_, level)); }
  int rate_levels() const { return plexus_codec_rate_levels(model_); }
  std::uint64_t fingerprint() const { return plexus_codec_model_fingerprint(model_); }

 private:
  plexus_codec_model* model_ = nullptr;
};

py::dict info(const py::buffer& data) {
  const py::buffer_info bytes = data.request();
  plexus_codec_info info{};
  check(plexus_codec_get_info(static_cast<const std::uint8_t*>(bytes.ptr),
                              static_cast<std::size_t>(bytes.size * bytes.itemsize), &info));
  py::dict result;
  result["width"] = info.width;
  result["height"] = info.height;
  result["model_fingerprint"] = info.model_fingerprint;
  result["format_version"] = info.format_version;
  result["grey"] = info.grey != 0;
  result["rate_level"] = info.variable_rate ? py::cast(info.rate_level) : py::none();
  return result;
}

}  // namespace

PYBIND11_MODULE(codec, module) {
  module.doc() = "The Plexus learned image codec: Model(quality=3).compress(pixels), .decompress(data), info(data)";
  codec_error = PyErr_NewException("plexus.codec.Error", PyExc_RuntimeError, nullptr);
  module.attr("Error") = py::handle(codec_error);
  module.attr("abi_version") = plexus_codec_abi_version();
  py::class_<Model>(module, "Model")
      .def(py::init<std::optional<double>, std::optional<std::string>, const std::string&, std::optional<double>>(),
           py::kw_only(), py::arg("quality") = py::none(), py::arg("path") = py::none(), py::arg("device") = "cpu",
           py::arg("level") = py::none(),
           "A shipped model of `quality` (1 to 6, default 3), or the model file at `path`, on `device` "
           "(cpu, cuda, cuda:N, auto); `level`: a variable-rate model file's rate level")
      .def("compress", &Model::compress, py::arg("pixels"),
           "H x W x 3 or H x W x 4 uint8 pixels (alpha is not coded) -> the bytes of a .pxae file")
      .def("decompress", &Model::decompress, py::arg("data"), "the bytes of a .pxae file -> H x W x 3 uint8 ndarray")
      .def("set_level", &Model::set_level, py::arg("level"), "a variable-rate model's rate level for compress")
      .def_property_readonly("rate_levels", &Model::rate_levels, "a variable-rate model's levels (0: one rate)")
      .def_property_readonly("fingerprint", &Model::fingerprint, "the model fingerprint its files carry");
  module.def("info", &info, py::arg("data"),
             "what a .pxae file says about itself, read without a model: width, height, model_fingerprint, "
             "format_version, grey, rate_level (None for a model of one rate)");
}
