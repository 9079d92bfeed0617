#include "plexus/json_nesting.h"

#include "plexus/error.h"

namespace plexus {

int json_nesting_depth(std::string_view text, int stop_above) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > deepest) deepest = depth;
      if (deepest > stop_above) break;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void check_json_nesting(std::string_view text, const std::string& source) {
  if (json_nesting_depth(text) > kMaxJsonNesting)
    throw ConfigError(source + ": the JSON nests arrays or objects more than " + std::to_string(kMaxJsonNesting) +
                      " levels deep");
}

}  // namespace plexus
