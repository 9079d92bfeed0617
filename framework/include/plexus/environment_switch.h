#pragma once
// Environment variables that turn a default code path off, so that a
// benchmark can time both in one build: PLEXUS_CONV_WGMMA=0,
// PLEXUS_CONV_WGMMA_TMA=0, PLEXUS_CONV_WGMMA_WGRAD_NHWC=0,
// PLEXUS_CONV_BRANCH=0, PLEXUS_GDN_BF16=0, PLEXUS_GDN_BF16_TILES=0,
// PLEXUS_BF16_STORAGE=0.
#include <cstdlib>
#include <cstring>

namespace plexus {

// Whether the environment variable `name` is set to "0".
inline bool switched_off_by_environment(const char* name) {
  const char* setting = std::getenv(name);
  return setting && std::strcmp(setting, "0") == 0;
}

}  // namespace plexus
