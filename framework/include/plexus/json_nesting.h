#pragma once
// A depth limit for every JSON document Plexus reads (model specs, checkpoint
// and model metadata, the quality catalog, metrics logs). nlohmann::json
// copies, compares and prints a value by recursion, one stack frame per level
// of nesting, so a document nested a hundred thousand levels deep (a few
// hundred kilobytes of brackets) would overflow the stack after it parsed.
#include <string>
#include <string_view>

namespace plexus {

// No Plexus document nests deeper than 8 levels; 64 leaves room for a
// plugin's own parameters.
inline constexpr int kMaxJsonNesting = 64;

// The deepest nesting of arrays and objects in `text`, counted in one pass
// without recursion, and stopping once it passes `stop_above`. Brackets inside
// strings do not count; text that is not valid JSON gives a meaningless but
// finite answer (the parser then reports it).
int json_nesting_depth(std::string_view text, int stop_above = kMaxJsonNesting);

// ConfigError "<source>: the JSON nests arrays or objects more than 64 levels
// deep" when `text` does; call it before parsing.
void check_json_nesting(std::string_view text, const std::string& source);

}  // namespace plexus
