// libpng's error and warning callbacks, shared by the PNG reader and writer.
#pragma once

#include <png.h>

#include <cstdio>

namespace plexus::data::png_errors {

// libpng reports errors through on_error, which must not return: it keeps the
// message here and jumps back to the caller's setjmp.
struct ErrorState {
  char message[200] = "";
};

inline void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<ErrorState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message);
  png_longjmp(png, 1);
}

// Warnings (a wrong sRGB profile, a bad ancillary chunk CRC) leave the
// pixels intact: ignored.
inline void on_warning(png_structp, png_const_charp) {}

}  // namespace plexus::data::png_errors
