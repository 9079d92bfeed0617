// plexus-ae: train and evaluate learned image-compression autoencoders, and
// compress images with them. Each command declares its options on the
// command line (add_<command>_command) and runs once CLI11 has parsed them.
// Every error ends in one message on stderr and exit code 1.
#include <malloc.h>

#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "compress_command.h"
#include "console.h"
#include "eval_command.h"
#include "plexus/registry.h"
#include "plexus/train/exit_codes.h"
#include "summary_command.h"
#include "train_command.h"

namespace {

// "Did you mean" for the command line: after CLI11 rejects the arguments,
// looks for the first subcommand or --option that no command registered and
// suggests the closest registered one. Works over whatever subcommands and
// options the CLI11 app holds, so commands added later are covered too.

// "--steps", "--help": every long name a command accepts.
std::vector<std::string> long_options(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options())
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

const CLI::Option* find_long_option(const CLI::App& command, const std::string& name) {
  for (const CLI::Option* option : command.get_options())
    for (const std::string& known : option->get_lnames())
      if ("--" + known == name) return option;
  return nullptr;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : "'") + names[i] + "'";
  return text;
}

// "; did you mean 'train'?" or, without a close name, "; known: 'train', 'eval'".
std::string hint(const std::string& name, const std::vector<std::string>& known, const char* kind) {
  const auto close = plexus::close_matches(name, known, 1);  // the closest only
  if (!close.empty()) return "; did you mean " + quoted_list(close) + "?";
  return std::string("; ") + kind + ": " + quoted_list(known);
}

// A message such as "unknown command 'trian'; did you mean 'train'?" or
// "'plexus-ae train' has no option '--step'; did you mean '--steps'?", or
// nothing when every name in `args` (argv without the program name) is known.
std::optional<std::string> diagnose_unknown_names(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* command = &app;
  std::string command_name = app.get_name();
  bool expect_value = false;
  for (const std::string& arg : args) {
    if (arg == "--") break;  // everything after is positional
    if (expect_value) {
      expect_value = false;
      continue;
    }
    if (arg.rfind("--", 0) == 0) {
      const std::string name = arg.substr(0, arg.find('='));
      const CLI::Option* option = find_long_option(*command, name);
      if (!option)
        return "'" + command_name + "' has no option '" + name + "'" + hint(name, long_options(*command), "options") +
               " (see '" + command_name + " --help')";
      expect_value = option->get_type_size() != 0 && arg.find('=') == std::string::npos;
      continue;
    }
    if (arg.rfind('-', 0) == 0) continue;  // short options: CLI11's own message
    // A bare word: the next subcommand, where the command has any.
    const auto subcommands = command->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) continue;  // a positional value
    const CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (const CLI::App* sub : subcommands) {
      names.push_back(sub->get_name());
      if (sub->check_name(arg)) next = sub;
    }
    if (!next)
      return "unknown command '" + arg + "'" + hint(arg, names, "commands") + " (see '" + command_name + " --help')";
    command = next;
    command_name += " " + next->get_name();
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  namespace ae = plexus::ae;
  // Buffers of a megabyte or more come straight from the system and go back
  // to it when freed: glibc's default threshold rises after each large free,
  // and the codec's phases (the bands, the integer network, the coding) then
  // each left hundreds of megabytes in the heap that the next phase could not use whole.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // The heap keeps 64 MiB beyond its top when it grows or is trimmed, and
  // serves a large buffer from there before mapping one: each convolution
  // block's columns and each integer-network layer's tensors then reuse
  // pages already touched, where fresh mappings cost a page fault per 4 KiB
  // (a fifth of a 768x512 image's CPU time); at most that much more is held.
  mallopt(M_TOP_PAD, 64 << 20);
  ae::configure_logging();
  CLI::App app{"plexus-ae: train and evaluate learned image-compression autoencoders (Plexus)."};
  app.name("plexus-ae");
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", "plexus-ae 0.1.0");
  app.option_defaults()->always_capture_default();
  app.footer("Examples:\n"
             "  plexus-ae train --data data/train-sample --model bls2017 --steps 200 --patch 64 --out runs/demo\n"
             "  plexus-ae train --out runs/demo --resume --steps 400\n"
             "  plexus-ae eval --model runs/demo/model.safetensors --data data/eval-sample --out runs/demo/recon\n"
             "  plexus-ae compress --model runs/demo/model.safetensors photo.png        # writes photo.pxae\n"
             "  plexus-ae decompress --model runs/demo/model.safetensors photo.pxae -o decoded.png\n"
             "  plexus-ae info photo.pxae        # size, bits per pixel, format and model of a compressed file\n"
             "  plexus-ae layers                 # the layer types a model spec can use, with their params\n"
             "  plexus-ae summary bls2017        # a model's nodes: output shapes, parameters, FLOPs\n"
             "Run 'plexus-ae <command> --help' for every option of a command.");

  int exit_code = plexus::train::kExitOk;  // the parsed command's
  ae::add_train_command(app, exit_code, std::vector<std::string>(argv + 1, argv + argc));
  ae::add_eval_command(app, exit_code);
  ae::add_compress_command(app, exit_code);
  ae::add_decompress_command(app, exit_code);
  ae::add_export_command(app, exit_code);
  ae::add_info_command(app, exit_code);
  ae::add_layers_command(app, exit_code);
  ae::add_summary_command(app, exit_code);

  try {
    app.parse(argc, argv);  // and runs the command
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {  // not --help or --version: first look for a misspelt name
      if (auto message = diagnose_unknown_names(app, std::vector<std::string>(argv + 1, argv + argc))) {
        spdlog::error("{}", *message);
        return plexus::train::kExitError;
      }
    }
    if (e.get_exit_code() == 0) return app.exit(e);  // prints help or version
    // In the style of every other error ("error: ..."), then where the options are listed.
    spdlog::error("{}", e.what());
    std::fputs("Run with --help for more information.\n", stderr);
    return plexus::train::kExitError;
  } catch (const std::bad_alloc&) {
    spdlog::error("out of memory (try a smaller --batch or --patch, or a smaller model)");
    return plexus::train::kExitError;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return plexus::train::kExitError;
  }
  return exit_code;
}
