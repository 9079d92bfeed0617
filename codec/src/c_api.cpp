// The C API (plexus/codec.h) over CodecModel: every entry point runs its
// body inside `guarded`, which turns any exception into a status and the
// thread's last-error text, so that none crosses into C.
#include "plexus/codec.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "plexus/builtin_layers.h"
#include "plexus/codec/bitstream.h"
#include "plexus/codec/codec_model.h"
#include "plexus/codec/quality_catalog.h"
#include "plexus/error.h"
#include "plexus/plugin.h"

struct plexus_codec_model {
  plexus::Registry registry;  // outlives the model built from it
  std::unique_ptr<plexus::codec::CodecModel> codec;
};

namespace {

using plexus::codec::CodecModel;

thread_local std::string last_error;

// A refusal of the API itself (an argument), with its status.
struct Refusal {
  plexus_codec_status status;
  std::string message;
};

[[noreturn]] void refuse(const std::string& message, plexus_codec_status status = PLEXUS_CODEC_INVALID_ARGUMENT) {
  throw Refusal{status, message};
}

// Runs `body`; a plexus::Error other than a device's gives `error_status`.
template <typename Body>
plexus_codec_status guarded(const char* function, plexus_codec_status error_status, Body&& body) {
  plexus_codec_status status = PLEXUS_CODEC_OK;
  std::string message;
  try {
    body();
  } catch (const Refusal& refusal) {
    status = refusal.status;
    message = refusal.message;
  } catch (const plexus::DeviceError& e) {
    status = PLEXUS_CODEC_DEVICE_ERROR;
    message = e.what();
  } catch (const plexus::Error& e) {
    status = error_status;
    message = e.what();
  } catch (const std::bad_alloc&) {
    status = PLEXUS_CODEC_OUT_OF_MEMORY;
    message = "out of memory";
  } catch (const std::exception& e) {
    status = PLEXUS_CODEC_INTERNAL_ERROR;
    message = e.what();
  } catch (...) {
    status = PLEXUS_CODEC_INTERNAL_ERROR;
    message = "an unknown exception";
  }
  try {
    last_error = status == PLEXUS_CODEC_OK ? std::string() : std::string(function) + ": " + message;
  } catch (...) {
    last_error.clear();  // no memory even for the message: the status says it
  }
  return status;
}

void require(const void* pointer, const char* name) {
  if (!pointer) refuse(std::string(name) + " is NULL");
}

void check_abi(int abi_version) {
  if ((abi_version >> 8) != (PLEXUS_CODEC_ABI_VERSION >> 8))
    refuse("the program was built against plexus/codec.h ABI version " + std::to_string(abi_version) +
               ", this library has " + std::to_string(PLEXUS_CODEC_ABI_VERSION) + " (another major version)",
           PLEXUS_CODEC_ABI_MISMATCH);
}

plexus::Device device_of(const char* device) {
  try {
    return plexus::parse_device(device ? device : "auto");
  } catch (const plexus::DeviceError&) {
    throw;
  } catch (const plexus::Error& e) {
    refuse(std::string("device: ") + e.what());
  }
}

// The model at `path`, on `device`, its level 0 when it is variable-rate.
std::unique_ptr<plexus_codec_model> open_model(const std::string& path, const char* device) {
  const plexus::Device on = device_of(device);
  auto model = std::make_unique<plexus_codec_model>();
  model->registry = plexus::builtin_registry();
  for (const std::string& plugin : plexus::plugins_from_environment()) plexus::load_plugin(plugin, model->registry);
  model->codec = CodecModel::from_file(path, model->registry, on);
  if (model->codec->rate_levels() > 0) model->codec->set_rate_level(0);
  return model;
}

// The bytes of rows of `height` lines `stride` apart, each `row` bytes: the
// buffer must hold (height - 1) * stride + row.
std::size_t span_bytes(std::uint32_t height, std::size_t stride, std::size_t row) {
  if (stride < row)
    refuse("stride " + std::to_string(stride) + " is less than a row's " + std::to_string(row) + " bytes");
  if (height > 1 && stride > (std::numeric_limits<std::size_t>::max() - row) / (height - 1))
    refuse("stride " + std::to_string(stride) + " times the height overflows");
  return static_cast<std::size_t>(height - 1) * stride + row;
}

plexus_codec_status encode(const char* function, plexus_codec_model* model, const std::uint8_t* pixels, int channels,
                           std::uint32_t width, std::uint32_t height, std::size_t stride, std::uint8_t** output,
                           std::size_t* output_size) {
  if (output) *output = nullptr;
  if (output_size) *output_size = 0;
  return guarded(function, PLEXUS_CODEC_INVALID_ARGUMENT, [&] {
    require(model, "model");
    require(pixels, "pixels");
    require(output, "output");
    require(output_size, "output_size");
    if (width < 1 || height < 1 || width > plexus::codec::kMaxImageSide || height > plexus::codec::kMaxImageSide)
      refuse("image size " + std::to_string(width) + "x" + std::to_string(height) + " is not in 1x1 to " +
             std::to_string(plexus::codec::kMaxImageSide) + "x" + std::to_string(plexus::codec::kMaxImageSide));
    span_bytes(height, stride, static_cast<std::size_t>(width) * channels);
    plexus::data::Image image(static_cast<int>(width), static_cast<int>(height));
    for (std::uint32_t y = 0; y < height; ++y) {
      const std::uint8_t* row = pixels + y * stride;
      std::uint8_t* to = image.pixels.data() + static_cast<std::size_t>(y) * width * 3;
      for (std::uint32_t x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c) to[x * 3 + c] = row[static_cast<std::size_t>(x) * channels + c];
    }
    const std::vector<std::uint8_t> bytes = model->codec->compress(image);
    auto* buffer = static_cast<std::uint8_t*>(std::malloc(bytes.size()));
    if (!buffer) throw std::bad_alloc();
    std::memcpy(buffer, bytes.data(), bytes.size());
    *output = buffer;
    *output_size = bytes.size();
  });
}

plexus_codec_status decode(const char* function, plexus_codec_model* model, const std::uint8_t* data, std::size_t size,
                           int channels, std::uint8_t* output, std::size_t output_size, std::size_t stride) {
  return guarded(function, PLEXUS_CODEC_BAD_FILE, [&] {
    require(model, "model");
    require(data, "data");
    require(output, "output");
    // The size from the head first, so that a buffer too small costs no decoding.
    const plexus::codec::BitstreamHead head = plexus::codec::read_bitstream_head(data, size);
    const std::size_t row = static_cast<std::size_t>(head.width) * channels;
    if (head.width == 0 || head.height == 0) refuse("truncated before the image size", PLEXUS_CODEC_BAD_FILE);
    const std::size_t needed = span_bytes(head.height, stride, row);
    if (output_size < needed)
      refuse("a " + std::to_string(head.width) + "x" + std::to_string(head.height) + " image with stride " +
                 std::to_string(stride) + " needs " + std::to_string(needed) + " bytes, the buffer has " +
                 std::to_string(output_size),
             PLEXUS_CODEC_BUFFER_TOO_SMALL);
    const plexus::data::Image image = model->codec->decompress(data, size);
    if (static_cast<std::uint32_t>(image.width) != head.width ||
        static_cast<std::uint32_t>(image.height) != head.height)
      refuse("the decoded image is " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                 ", not the header's size",
             PLEXUS_CODEC_INTERNAL_ERROR);
    for (std::uint32_t y = 0; y < head.height; ++y) {
      const std::uint8_t* from = image.pixels.data() + static_cast<std::size_t>(y) * head.width * 3;
      std::uint8_t* to = output + y * stride;
      for (std::uint32_t x = 0; x < head.width; ++x) {
        for (int c = 0; c < 3; ++c) to[static_cast<std::size_t>(x) * channels + c] = from[x * 3 + c];
        if (channels == 4) to[static_cast<std::size_t>(x) * 4 + 3] = 255;
      }
    }
  });
}

}  // namespace

extern "C" {

int plexus_codec_abi_version(void) { return PLEXUS_CODEC_ABI_VERSION; }

const char* plexus_codec_last_error(void) { return last_error.c_str(); }

plexus_codec_status plexus_codec_open_file_abi(int abi_version, const char* path, const char* device,
                                               plexus_codec_model** model) {
  if (model) *model = nullptr;
  return guarded("plexus_codec_open_file", PLEXUS_CODEC_MODEL_ERROR, [&] {
    check_abi(abi_version);
    require(path, "path");
    require(model, "model");
    *model = open_model(path, device).release();
  });
}

plexus_codec_status plexus_codec_open_quality_abi(int abi_version, double quality, const char* device,
                                                  plexus_codec_model** model) {
  if (model) *model = nullptr;
  return guarded("plexus_codec_open_quality", PLEXUS_CODEC_MODEL_ERROR, [&] {
    check_abi(abi_version);
    require(model, "model");
    if (!(quality >= 1 && quality <= 99)) refuse("quality " + std::to_string(quality) + " is not in [1, 99]");
    plexus::codec::QualityChoice choice;
    try {
      choice = plexus::codec::choose_quality(
          plexus::codec::load_quality_catalog(plexus::codec::shipped_quality_catalog_path()), quality);
    } catch (const plexus::ConfigError& e) {
      refuse(e.what());  // a quality the catalog does not have, or does not ship
    }
    std::unique_ptr<plexus_codec_model> opened = open_model(choice.path, device);
    if (choice.level) opened->codec->set_rate_level(*choice.level);
    *model = opened.release();
  });
}

void plexus_codec_close(plexus_codec_model* model) { delete model; }

int plexus_codec_rate_levels(const plexus_codec_model* model) { return model ? model->codec->rate_levels() : 0; }

plexus_codec_status plexus_codec_set_level(plexus_codec_model* model, double level) {
  return guarded("plexus_codec_set_level", PLEXUS_CODEC_INVALID_ARGUMENT, [&] {
    require(model, "model");
    model->codec->set_rate_level(level);
  });
}

uint64_t plexus_codec_model_fingerprint(const plexus_codec_model* model) {
  return model ? model->codec->fingerprint() : 0;
}

plexus_codec_status plexus_codec_get_info(const uint8_t* data, size_t size, plexus_codec_info* info) {
  return guarded("plexus_codec_get_info", PLEXUS_CODEC_BAD_FILE, [&] {
    require(data, "data");
    require(info, "info");
    const plexus::codec::BitstreamHeader header = plexus::codec::read_bitstream(data, size).header;
    *info = plexus_codec_info{};
    info->width = header.width;
    info->height = header.height;
    info->model_fingerprint = header.fingerprint;
    info->format_version = header.version;
    info->grey = header.grey ? 1 : 0;
    info->variable_rate = header.variable_rate ? 1 : 0;
    info->rate_level = header.rate_level / double(plexus::codec::kRateLevelOne);
  });
}

plexus_codec_status plexus_codec_encode_rgb(plexus_codec_model* model, const uint8_t* rgb, uint32_t width,
                                            uint32_t height, size_t stride, uint8_t** output, size_t* output_size) {
  return encode("plexus_codec_encode_rgb", model, rgb, 3, width, height, stride, output, output_size);
}

plexus_codec_status plexus_codec_encode_rgba(plexus_codec_model* model, const uint8_t* rgba, uint32_t width,
                                             uint32_t height, size_t stride, uint8_t** output, size_t* output_size) {
  return encode("plexus_codec_encode_rgba", model, rgba, 4, width, height, stride, output, output_size);
}

plexus_codec_status plexus_codec_decode_rgb(plexus_codec_model* model, const uint8_t* data, size_t size,
                                            uint8_t* output, size_t output_size, size_t stride) {
  return decode("plexus_codec_decode_rgb", model, data, size, 3, output, output_size, stride);
}

plexus_codec_status plexus_codec_decode_rgba(plexus_codec_model* model, const uint8_t* data, size_t size,
                                             uint8_t* output, size_t output_size, size_t stride) {
  return decode("plexus_codec_decode_rgba", model, data, size, 4, output, output_size, stride);
}

void plexus_codec_free(void* buffer) { std::free(buffer); }

}  // extern "C"
