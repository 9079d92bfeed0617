// plexus-ae: train and evaluate learned image-compression autoencoders, and
// compress images with them. Each command declares its options on the
// command line (add_<command>_command) and runs once CLI11 has parsed them.
// Every error ends in one message on stderr and exit code 1.
#include <malloc.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli_suggestions.h"
#include "compress_command.h"
#include "console.h"
#include "eval_command.h"
#include "plexus/train/exit_codes.h"
#include "info_command.h"
#include "layers_command.h"
#include "summary_command.h"
#include "train_command.h"

int main(int argc, char** argv) {
  namespace ae = plexus::ae;
  // Buffers of a megabyte or more come straight from the system and go back
  // to it when freed: glibc's default threshold rises after each large free,
  // and the codec's phases (the bands, the integer network, the coding) then
  // each left hundreds of megabytes in the heap that the next phase could not use whole.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
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
      if (auto message = ae::diagnose_unknown_names(app, std::vector<std::string>(argv + 1, argv + argc))) {
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
