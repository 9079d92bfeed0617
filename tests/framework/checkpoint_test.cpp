// safetensors files and training checkpoints: round trips, the on-disk format
// read back by hand, every kind of corrupt file, atomic writes, optimiser
// state, and parameter / shape / optimiser mismatches.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/checkpoint.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("(not an IoError) ") + e.what();
  }
  return "(no error thrown)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64_le(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// A file with the given header text and `data_bytes` bytes of data.
std::string raw_file(const std::string& header, std::size_t data_bytes) {
  return u64_le(header.size()) + header + std::string(data_bytes, '\x01');
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "plexus_checkpoint_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    ASSERT_NE(::mkdtemp(buffer.data()), nullptr);
    folder_ = buffer.data();
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }
  std::string path(const std::string& name) const { return folder_ + "/" + name; }
  std::string folder_;
};

TensorFile sample_file() {
  TensorFile file;
  file.tensors["encoder.weight"] = Tensor::from_values({1.5, -2.25, 3.0, 0.1, 1e-30, -7}, {2, 3}, DType::f32);
  file.tensors["encoder.bias"] = Tensor::from_values({0.1, 1e300, -3.0, 4.5}, {4}, DType::f64);
  file.tensors["scalar"] = Tensor::from_values({42.0}, Shape{}, DType::f64);
  file.tensors["empty"] = Tensor(Shape{0, 3}, DType::f32);
  file.metadata["note"] = "quotes \" and \\ and unicode \xc3\xa9";
  file.metadata["lambda"] = "0.01";
  return file;
}

TEST_F(CheckpointTest, SafetensorsRoundTrip) {
  TensorFile original = sample_file();
  save_safetensors(path("a.safetensors"), original);
  TensorFile loaded = load_safetensors(path("a.safetensors"));
  EXPECT_EQ(loaded.metadata, original.metadata);
  ASSERT_EQ(loaded.tensors.size(), original.tensors.size());
  for (const auto& [name, tensor] : original.tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    const Tensor& back = loaded.tensors.at(name);
    EXPECT_EQ(back.shape(), tensor.shape()) << name;
    EXPECT_EQ(back.dtype(), tensor.dtype()) << name;
    EXPECT_EQ(back.device(), Device::cpu()) << name;
    EXPECT_EQ(back.to_values(), tensor.to_values()) << name;  // bit-exact
  }
  // No temporary file is left behind.
  EXPECT_NE(::access((path("a.safetensors") + ".tmp-" + std::to_string(::getpid())).c_str(), F_OK), 0);
}

// The metadata alone: the same strings, the header checked as a full load
// checks it, and no tensor read (a data section that a full load refuses
// does not matter).
TEST_F(CheckpointTest, MetadataAloneIsReadFromTheHeader) {
  save_safetensors(path("a.safetensors"), sample_file());
  EXPECT_EQ(load_safetensors_metadata(path("a.safetensors")), sample_file().metadata);
  write_bytes(path("none"), raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8));
  EXPECT_TRUE(load_safetensors_metadata(path("none")).empty());
  write_bytes(path("short_data"), raw_file(R"({"__metadata__": {"k": "v"}, "a": {"dtype": "F32", "shape": [2], )"
                                           R"("data_offsets": [0, 8]}})",
                                           3));
  EXPECT_EQ(load_safetensors_metadata(path("short_data")), (std::map<std::string, std::string>{{"k", "v"}}));
  EXPECT_TRUE(contains(error_of([&] { load_safetensors(path("short_data")); }), "beyond the data section"));
  write_bytes(path("bad_metadata"), raw_file(R"({"__metadata__": {"step": 3}})", 0));
  EXPECT_TRUE(contains(error_of([&] { load_safetensors_metadata(path("bad_metadata")); }),
                       "safetensors file '" + path("bad_metadata") +
                           "': \"__metadata__\" entry 'step' must be a "
                           "string, got 3"));
  EXPECT_TRUE(contains(error_of([&] { load_safetensors_metadata(path("missing")); }),
                       "safetensors file '" + path("missing") + "': cannot open it: No such file or directory"));
}

TEST_F(CheckpointTest, FileFollowsTheSafetensorsLayout) {
  save_safetensors(path("a.safetensors"), sample_file());
  std::string bytes = read_bytes(path("a.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i)
    header_size |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(header_size % 8, 0u);
  ASSERT_LE(8 + header_size, bytes.size());
  std::string header_text = bytes.substr(8, header_size);
  EXPECT_EQ(header_text.front(), '{');
  EXPECT_EQ(header_text.find_last_not_of(' ') + 1, header_text.find_last_of('}') + 1);  // only spaces pad it
  nlohmann::json header = nlohmann::json::parse(header_text);
  const std::string data = bytes.substr(8 + header_size);

  ASSERT_TRUE(header.contains("__metadata__"));
  EXPECT_EQ(header["__metadata__"]["lambda"], "0.01");
  EXPECT_EQ(header["encoder.weight"]["dtype"], "F32");
  EXPECT_EQ(header["encoder.weight"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["encoder.bias"]["dtype"], "F64");
  EXPECT_EQ(header["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(header["empty"]["shape"], nlohmann::json({0, 3}));

  // The offsets tile the data section exactly, each span the tensor's size.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    auto offsets = it.value()["data_offsets"];
    std::uint64_t begin = offsets[0], end = offsets[1];
    std::uint64_t numel = 1;
    for (auto d : it.value()["shape"]) numel *= d.get<std::uint64_t>();
    EXPECT_EQ(end - begin, numel * (it.value()["dtype"] == "F64" ? 8u : 4u)) << it.key();
    spans.push_back({begin, end});
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t cursor = 0;
  for (auto [begin, end] : spans) {
    EXPECT_EQ(begin, cursor);
    cursor = end;
  }
  EXPECT_EQ(cursor, data.size());

  // Decode two tensors straight from the bytes.
  std::uint64_t w_begin = header["encoder.weight"]["data_offsets"][0];
  float weight[6];
  std::memcpy(weight, data.data() + w_begin, sizeof weight);
  EXPECT_EQ(weight[0], 1.5f);
  EXPECT_EQ(weight[1], -2.25f);
  EXPECT_EQ(weight[5], -7.0f);
  std::uint64_t b_begin = header["encoder.bias"]["data_offsets"][0];
  double bias[4];
  std::memcpy(bias, data.data() + b_begin, sizeof bias);
  EXPECT_EQ(bias[1], 1e300);
  EXPECT_EQ(bias[3], 4.5);
}

TEST_F(CheckpointTest, CorruptFilesNameTheFileAndTheProblem) {
  struct Case {
    const char* name;
    std::string bytes;  // empty: the file does not exist
    const char* problem;
  };
  const std::string f32x2 = R"("dtype": "F32", "shape": [2])";
  std::vector<Case> cases = {
      {"missing", "", "cannot open it: No such file or directory"},
      {"short", std::string("\x05\x00\x00", 3), "the file is 3 bytes, shorter than the 8-byte header length"},
      {"long_header", u64_le(1000) + "{}", "the header length 1000 runs past the end of the file (10 bytes)"},
      {"bad_json", raw_file("{\"a\": {\"dtype\": ", 0), "the header is not valid JSON"},
      {"not_object", raw_file("[1, 2]", 0), "the header must begin with '{' (a JSON object)"},
      {"bf16", raw_file(R"({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})", 4),
       "tensor 'a' has unsupported dtype 'BF16' (Plexus reads F32, F64, F16 and I8)"},
      {"out_of_range", raw_file(R"({"a": {)" + f32x2 + R"(, "data_offsets": [0, 8]}})", 4),
       "tensor 'a' has data_offsets [0, 8] beyond the data section of 4 bytes"},
      {"overlap",
       raw_file(
           R"({"a": {)" + f32x2 + R"(, "data_offsets": [0, 8]}, "b": {)" + f32x2 + R"(, "data_offsets": [4, 12]}})",
           12),
       "tensor 'b' has data_offsets [4, 12] overlapping tensor 'a' [0, 8]"},
      {"reversed", raw_file(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 8),
       "tensor 'a' has data_offsets [8, 0] that end before they begin"},
      {"gap",
       raw_file(
           R"({"a": {)" + f32x2 + R"(, "data_offsets": [0, 8]}, "b": {)" + f32x2 + R"(, "data_offsets": [12, 20]}})",
           20),
       "tensor 'b' has data_offsets [12, 20] leaving a gap of unclaimed bytes from 8"},
      {"trailing", raw_file(R"({"a": {)" + f32x2 + R"(, "data_offsets": [0, 8]}})", 12),
       "the data section is 12 bytes but the tensors cover only 8"},
      {"size_mismatch", raw_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8),
       "tensor 'a' is F32[3], which needs 12 bytes, but its data_offsets [0, 8] span 8"},
      {"bad_shape", raw_file(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8),
       "tensor 'a' has a bad shape [-2]"},
      {"no_offsets", raw_file(R"({"a": {)" + f32x2 + R"(}})", 8), "tensor 'a' needs \"data_offsets\": [begin, end]"},
      {"bad_metadata", raw_file(R"({"__metadata__": {"step": 3}})", 0),
       "\"__metadata__\" entry 'step' must be a string, got 3"},
  };
  for (const Case& c : cases) {
    std::string file = path(c.name);
    if (!c.bytes.empty()) write_bytes(file, c.bytes);
    std::string message = error_of([&] { load_safetensors(file); });
    EXPECT_TRUE(contains(message, "safetensors file '" + file + "': " + c.problem)) << c.name << ": " << message;
  }
  // A well-formed hand-made file loads (the cases above differ from it only in their fault).
  write_bytes(path("good"), raw_file(R"({"a": {)" + f32x2 + R"(, "data_offsets": [0, 8]}})", 8));
  EXPECT_EQ(load_safetensors(path("good")).tensors.at("a").shape(), (Shape{2}));
}

TEST_F(CheckpointTest, FailingSaveLeavesTheExistingFileIntact) {
  const std::string target = path("model.safetensors");
  save_safetensors(target, sample_file());
  const std::string before = read_bytes(target);
  TensorFile other;
  other.tensors["x"] = Tensor::from_values({1, 2, 3}, {3});

  // The temporary file cannot be created (a folder sits at its name).
  const std::string temporary = target + ".tmp-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(temporary.c_str(), 0755), 0);
  EXPECT_TRUE(contains(error_of([&] { save_safetensors(target, other); }),
                       "cannot write checkpoint '" + target + "': cannot create '" + temporary + "'"));
  ::rmdir(temporary.c_str());
  EXPECT_EQ(read_bytes(target), before);

  // The disk "fills up" halfway through the data (a file-size limit).
  TensorFile large;
  large.tensors["big"] = Tensor(Shape{100000}, DType::f32);
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message = error_of([&] { save_safetensors(target, large); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(contains(message, "cannot write checkpoint '" + target + "': writing '" + temporary + "' failed"))
      << message;
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_NE(::access(temporary.c_str(), F_OK), 0) << "the partial temporary file was left behind";

  // A folder that does not exist.
  const std::string nowhere = path("no/such/folder/model.safetensors");
  EXPECT_TRUE(
      contains(error_of([&] { save_safetensors(nowhere, other); }), "cannot write checkpoint '" + nowhere + "'"));
  // The target is replaced only by a successful save.
  save_safetensors(target, other);
  EXPECT_EQ(load_safetensors(target).tensors.size(), 1u);
}

// x [4, 5] -> fc1 (3) -> fc2 (2)
ModelSpec two_layer_spec(std::int64_t hidden = 3) {
  ModelSpec spec;
  spec.name = "two_layer";
  spec.add_input("x")
      .add_node({"fc1", "FullyConnected", {"x"}, {"h"}, {{"out_features", hidden}}})
      .add_node({"fc2", "FullyConnected", {"h"}, {"y"}, {{"out_features", 2}}});
  return spec;
}

const Registry registry = builtin_registry();

std::map<std::string, std::vector<double>> parameter_values(Net& net) {
  std::map<std::string, std::vector<double>> values;
  for (const NamedParameter& p : net.parameters()) values[p.name] = p.parameter->value.to_values();
  return values;
}

// Deterministic fake gradients, different per step and per element.
void set_gradients(Net& net, int step) {
  for (const NamedParameter& p : net.parameters()) {
    std::vector<double> g(static_cast<std::size_t>(p.parameter->grad.numel()));
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(1.0 + 0.7 * static_cast<double>(i) + 1.3 * step);
    p.parameter->grad.copy_from(Tensor::from_values(g, p.parameter->shape, net.dtype(), net.device()));
  }
}

TEST_F(CheckpointTest, CheckpointRoundTripWithOptimizerContinuesIdentically) {
  const std::string file = path("run.safetensors");
  Context ctx;
  Net trained(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), /*seed=*/1);
  Adam adam(0.01);
  for (int step = 0; step < 3; ++step) {
    set_gradients(trained, step);
    adam.step(ctx, trained.parameters());
  }
  save_checkpoint(file, trained, &adam, 3, {{"lambda", "0.01"}});

  Net restored(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), /*seed=*/2);
  ASSERT_NE(parameter_values(restored), parameter_values(trained));
  Adam restored_adam(0.01);
  std::map<std::string, std::string> metadata;
  EXPECT_EQ(load_checkpoint(file, restored, &restored_adam, &metadata), 3);
  EXPECT_EQ(parameter_values(restored), parameter_values(trained));
  EXPECT_EQ(restored_adam.steps_taken(), 3);
  EXPECT_EQ(metadata.at("step"), "3");
  EXPECT_EQ(metadata.at("optimizer"), "Adam");
  EXPECT_EQ(metadata.at("lambda"), "0.01");
  EXPECT_EQ(nlohmann::json::parse(metadata.at("model_spec")), two_layer_spec().to_json());

  // The tensors carry the Net's names, and the optimiser's state its own.
  TensorFile raw = load_safetensors(file);
  for (const char* name :
       {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "optimizer/m/fc1.weight", "optimizer/v/fc2.bias"})
    EXPECT_TRUE(raw.tensors.count(name)) << name;
  EXPECT_EQ(raw.tensors.at("fc1.weight").shape(), (Shape{3, 5}));
  EXPECT_EQ(raw.tensors.at("fc1.weight").dtype(), DType::f32);

  for (int step = 3; step < 6; ++step) {
    set_gradients(trained, step);
    adam.step(ctx, trained.parameters());
    set_gradients(restored, step);
    restored_adam.step(ctx, restored.parameters());
  }
  EXPECT_EQ(parameter_values(restored), parameter_values(trained));
}

TEST_F(CheckpointTest, LoadConvertsDtype) {
  const std::string file = path("f32.safetensors");
  Net single(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 1);
  save_checkpoint(file, single, nullptr, 10);
  Net doubled(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f64, Device::cpu(), 2);
  EXPECT_EQ(load_checkpoint(file, doubled, nullptr), 10);
  EXPECT_EQ(parameter_values(doubled), parameter_values(single));  // f32 values are exact in f64
  EXPECT_EQ(doubled.parameters()[0].parameter->value.dtype(), DType::f64);
  // Without an optimiser there is no optimiser state in the file.
  for (const auto& entry : load_safetensors(file).tensors) EXPECT_NE(entry.first.rfind("optimizer/", 0), 0u);
}

TEST_F(CheckpointTest, LoadRefusesMismatchesAndLeavesTheNetUntouched) {
  const std::string file = path("run.safetensors");
  Net net(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 1);
  Adam adam(0.01);
  Context ctx;
  set_gradients(net, 0);
  adam.step(ctx, net.parameters());
  save_checkpoint(file, net, &adam, 1);

  Net wider(two_layer_spec(4), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 3);
  auto before = parameter_values(wider);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(file, wider, nullptr); }),
                       "checkpoint '" + file + "': tensor 'fc1.bias' is [3] in the file but [4] in the net"));
  EXPECT_EQ(parameter_values(wider), before);

  ModelSpec deeper = two_layer_spec();
  deeper.add_node({"fc3", "FullyConnected", {"y"}, {"z"}, {{"out_features", 1}}});
  Net three(deeper, registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 3);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(file, three, nullptr); }),
                       "checkpoint '" + file + "' has no tensor 'fc3.bias' (the net's is f32[1] on cpu)"));

  Net same(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 3);
  Sgd sgd(0.1);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(file, same, &sgd); }),
                       "checkpoint '" + file + "' holds Adam optimiser state, not SGD"));
  const std::string no_state = path("no_state.safetensors");
  save_checkpoint(no_state, same, nullptr, 0);
  Adam fresh(0.01);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(no_state, same, &fresh); }),
                       "checkpoint '" + no_state + "' holds no optimiser state, but a Adam optimiser was given"));
  EXPECT_TRUE(contains(error_of([&] {
                         save_checkpoint(no_state, same, nullptr, 0, {{"step", "9"}});
                       }),
                       "metadata key 'step' is reserved"));
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(path("absent.safetensors"), same, nullptr); }),
                       "safetensors file '" + path("absent.safetensors") + "': cannot open it"));
}

// The message of the ConfigError `fn` throws, or a note saying what happened instead.
template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("(not a ConfigError) ") + e.what();
  }
  return "(no error thrown)";
}

TEST_F(CheckpointTest, RecordsPluginLayerTypesAndNamesThePluginWhenOneIsMissing) {
  // What the plugin loader does: registrations made while a plugin's origin is set.
  Registry with_plugin = builtin_registry();
  with_plugin.set_origin("plugin /opt/plexus/plugins/libplugin_dense.so");
  with_plugin.add("PluginDense", with_plugin.info("FullyConnected").factory);
  with_plugin.set_origin("built-in");
  ModelSpec spec = two_layer_spec();
  spec.nodes[1].type = "PluginDense";
  spec.add_node({"fc3", "PluginDense", {"y"}, {"z"}, {{"out_features", 1}}});
  Net net(spec, with_plugin, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 1);
  const std::string file = path("plugin.safetensors");
  save_checkpoint(file, net, nullptr, 0);

  const TensorFile saved = load_safetensors(file);
  ASSERT_TRUE(saved.metadata.count("plugin_layers"));
  EXPECT_EQ(nlohmann::json::parse(saved.metadata.at("plugin_layers")),
            nlohmann::json({{"PluginDense", "libplugin_dense.so"}}));  // the file name, not the machine's path

  const std::string message = config_error_of([&] { spec_from_checkpoint(saved, file, registry); });
  EXPECT_TRUE(contains(message, "node 'fc2' has type 'PluginDense', unknown here; the checkpoint was written with "
                                "the plugin libplugin_dense.so"))
      << message;
  EXPECT_TRUE(contains(message, "--plugin")) << message;
  EXPECT_FALSE(contains(message, "'fc3'")) << "one node per type: " << message;
  EXPECT_EQ(spec_from_checkpoint(saved, file, with_plugin).nodes.size(), 3u);

  EXPECT_TRUE(contains(error_of([&] {
                         save_checkpoint(file, net, nullptr, 0, {{"plugin_layers", "{}"}});
                       }),
                       "metadata key 'plugin_layers' is reserved"));
}

TEST_F(CheckpointTest, BuiltInNetsRecordNoPluginsAndUnrecordedTypesAreLeftToNet) {
  Net net(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 1);
  const std::string file = path("built_in.safetensors");
  save_checkpoint(file, net, nullptr, 0);
  TensorFile saved = load_safetensors(file);
  EXPECT_FALSE(saved.metadata.count("plugin_layers"));
  ModelSpec renamed = two_layer_spec();
  renamed.nodes[0].type = "NoSuchLayer";
  EXPECT_NO_THROW(check_plugin_layers(saved, renamed, registry, file));
  saved.metadata["plugin_layers"] = "[1, 2]";
  EXPECT_TRUE(contains(error_of([&] { check_plugin_layers(saved, renamed, registry, file); }),
                       "metadata \"plugin_layers\" is not a JSON object"));
}

TEST_F(CheckpointTest, CudaNetRoundTrip) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const std::string file = path("gpu.safetensors");
  Context gpu(Device::cuda());
  Net on_gpu(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cuda(), 1);
  Adam adam(0.01);
  set_gradients(on_gpu, 0);
  adam.step(gpu, on_gpu.parameters());
  gpu.synchronize();
  save_checkpoint(file, on_gpu, &adam, 1);
  Net on_cpu(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cpu(), 2);
  Adam cpu_adam(0.01);
  load_checkpoint(file, on_cpu, &cpu_adam);
  EXPECT_EQ(parameter_values(on_cpu), parameter_values(on_gpu));
  Net back_on_gpu(two_layer_spec(), registry, {{"x", {4, 5}}}, DType::f32, Device::cuda(), 3);
  Adam gpu_adam(0.01);
  load_checkpoint(file, back_on_gpu, &gpu_adam);
  EXPECT_EQ(parameter_values(back_on_gpu), parameter_values(on_gpu));
  EXPECT_EQ(gpu_adam.state().at("m/fc1.weight").device(), Device::cuda());
}

}  // namespace
}  // namespace plexus
