#include "compress_command.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "plexus/error.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

const char* extension_of(CodecOutput kind) { return kind == CodecOutput::compressed ? ".pxae" : ".png"; }

// -o names a folder when it ends in '/' or is an existing folder.
bool names_folder(const std::string& out) {
  std::error_code error;
  return !out.empty() && (out.back() == '/' || fs::is_directory(out, error));
}

std::string lowercase_extension(const std::string& path) {
  std::string extension = fs::path(path).extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension;
}

std::string default_output(const std::string& input, CodecOutput kind) {
  // photo.pxae -> photo.decoded.png: not the name of the image it came from
  // (photo.png), and told apart from originals by name.
  if (kind == CodecOutput::image)
    return (fs::path(input).parent_path() / (fs::path(input).stem().string() + ".decoded.png")).string();
  return fs::path(input).replace_extension(extension_of(kind)).string();
}

void refuse_shared_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  std::map<std::string, std::string> claimed;  // output -> the input that claimed it
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto [it, fresh] = claimed.emplace(outputs[i], inputs[i]);
    if (!fresh)
      throw ConfigError("'" + inputs[i] + "' and '" + it->second + "' would both be written to '" + outputs[i] +
                        "'; give them different names or process them separately");
  }
}

// The folder `output` goes in, or the nearest existing folder above it when
// that is missing (create_parent_folders makes the rest): it must be a
// folder this process may create files in.
void check_folder_writable(const std::string& output) {
  const fs::path folder = fs::path(output).parent_path();
  fs::path existing = folder.empty() ? fs::path(".") : folder;
  fs::file_status status;
  for (;;) {
    std::error_code error;
    status = fs::status(existing, error);
    if (fs::exists(status)) break;
    if (error && error != std::errc::no_such_file_or_directory && error != std::errc::not_a_directory)
      throw IoError("cannot write '" + output + "': '" + existing.string() + "': " + error.message());
    const fs::path parent = existing.parent_path();
    if (existing == "." || parent == existing)
      throw IoError("cannot write '" + output + "': no folder of its path exists");
    existing = parent.empty() ? fs::path(".") : parent;
  }
  if (!fs::is_directory(status))
    throw IoError("cannot write '" + output + "': '" + existing.string() + "' is a file, not a folder (" +
                  std::strerror(ENOTDIR) + ")");
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    const std::string reason = std::strerror(errno);
    const std::string role = existing == folder || folder.empty() ? "its folder" : "the folder it would be created in";
    throw IoError("cannot write '" + output + "': " + role + " '" + existing.string() + "': " + reason);
  }
}

// Suggests an -o for the decoded image of `input` that is not its default name.
std::string another_name(const std::string& input) {
  return (fs::path(input).parent_path() / (fs::path(input).stem().string() + "-decoded.png")).string();
}

}  // namespace

std::vector<std::string> plan_outputs(const std::vector<std::string>& inputs, const std::string& out,
                                      CodecOutput kind) {
  if (std::count(inputs.begin(), inputs.end(), kStandardStream) > 1)
    throw ConfigError("'-' (standard input) is given more than once");
  const bool folder = names_folder(out);
  if (out == kStandardStream) {
    if (inputs.size() > 1)
      throw ConfigError("-o - (standard output) takes one input, not " + std::to_string(inputs.size()));
    return {out};
  }
  if (!out.empty() && !folder) {
    if (inputs.size() > 1)
      throw ConfigError("several inputs need -o to be a folder: end it with '/' or name an existing folder (-o '" +
                        out + "' is neither)");
    const std::string extension = lowercase_extension(out);
    if (kind == CodecOutput::image && extension != ".png")
      throw ConfigError("-o '" + out +
                        "': decompress writes PNG images; give a name ending in .png, "
                        "or a folder ending in '/'");
    if (kind == CodecOutput::compressed && (extension == ".png" || extension == ".jpg" || extension == ".jpeg"))
      throw ConfigError("-o '" + out + "': compress writes .pxae files, not " + extension +
                        " images; give a name such as '" + fs::path(out).replace_extension(".pxae").string() +
                        "', or a folder ending in '/'");
  }
  std::vector<std::string> outputs;
  for (const std::string& input : inputs) {
    if (input == kStandardStream && out.empty()) outputs.push_back(kStandardStream);  // a pipe, as cwebp and dwebp
    else if (input == kStandardStream && folder)
      throw ConfigError("'-' (standard input) has no file name to write into -o '" + out + "'; give -o a file name");
    else if (out.empty()) outputs.push_back(default_output(input, kind));
    else if (folder)
      outputs.push_back((fs::path(out) / fs::path(input).filename().replace_extension(extension_of(kind))).string());
    else outputs.push_back(out);
  }
  refuse_shared_outputs(inputs, outputs);
  return outputs;
}

void check_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs, CodecOutput kind,
                   bool default_names, bool overwrite) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string& input = inputs[i];
    const std::string& output = outputs[i];
    if (output == kStandardStream) continue;  // standard output: nothing to replace or create
    std::error_code error;
    const fs::file_status status = fs::status(output, error);
    if (fs::is_directory(status))
      throw ConfigError("cannot write '" + output + "': it is a folder; choose another output with -o");
    if (fs::exists(status) && input != kStandardStream && fs::equivalent(input, output, error))
      throw ConfigError("'" + input + "' would be written over itself; choose another -o");
    if (fs::exists(status) && !overwrite) {
      if (default_names && kind == CodecOutput::image)
        throw ConfigError("'" + output + "', the default output of '" + input +
                          "', already exists; choose where to write it with -o, e.g. -o " + another_name(input) +
                          " (or -o FOLDER/ for several files)");
      throw ConfigError("'" + output + "' already exists; pass --overwrite to replace it, or choose another -o");
    }
    check_folder_writable(output);
  }
}

void check_inputs_are_files(const std::vector<std::string>& inputs, CodecOutput kind) {
  for (const std::string& input : inputs) {
    std::error_code error;
    if (input == kStandardStream || !fs::is_directory(input, error)) continue;
    std::string folder = input;
    while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
    if (kind == CodecOutput::compressed)
      throw ConfigError("'" + folder + "' is a folder; to compress the images in it, give them: " + folder + "/*.png");
    throw ConfigError("'" + folder + "' is a folder; to decompress the files in it, give them: " + folder + "/*.pxae");
  }
}

void create_parent_folders(const std::string& output) {
  if (output == kStandardStream) return;
  const fs::path folder = fs::path(output).parent_path();
  if (folder.empty()) return;
  std::error_code error;
  fs::create_directories(folder, error);
  if (error)
    throw IoError("cannot create the folder '" + folder.string() + "' for '" + output + "': " + error.message());
}

void OutputFolders::create_parents(const std::string& output) {
  std::vector<fs::path> missing;  // innermost first
  std::error_code error;
  for (fs::path folder = fs::path(output).parent_path(); !folder.empty() && !fs::exists(folder, error);
       folder = folder.parent_path())
    missing.push_back(folder);
  create_parent_folders(output);
  for (auto folder = missing.rbegin(); folder != missing.rend(); ++folder) created_.push_back(folder->string());
}

OutputFolders::~OutputFolders() {
  // Innermost first; removing a folder that is not empty fails, and leaves it.
  for (auto folder = created_.rbegin(); folder != created_.rend(); ++folder) {
    std::error_code ignored;
    if (fs::is_directory(*folder, ignored) && fs::is_empty(*folder, ignored)) fs::remove(*folder, ignored);
  }
}

}  // namespace plexus::ae
