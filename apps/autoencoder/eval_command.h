#pragma once
#include "options.h"

namespace plexus::ae {

// `plexus-ae eval`: every image of --data at full size through the model in
// eval mode; prints a table (name, size, PSNR, bpp) and the means to stdout;
// with --out, writes reconstructions as PNG and eval.json.
int run_eval(const EvalOptions& options);

}  // namespace plexus::ae
