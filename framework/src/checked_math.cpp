#include "plexus/checked_math.h"

namespace plexus {

std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result))
    throw ShapeError(what + " overflows: " + std::to_string(a) + " + " + std::to_string(b) +
                     " does not fit in 64 bits");
  return result;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result))
    throw ShapeError(what + " overflows: " + std::to_string(a) + " * " + std::to_string(b) +
                     " does not fit in 64 bits");
  return result;
}

std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& what) {
  std::size_t result = 0;
  if (__builtin_mul_overflow(a, b, &result))
    throw ShapeError(what + " overflows: " + std::to_string(a) + " * " + std::to_string(b) + " bytes");
  return result;
}

}  // namespace plexus
