#pragma once
// A first pass over a safetensors header (a JSON object) that looks only at
// its own keys: it counts the tensor entries and finds a name given twice,
// before the header is parsed into a DOM. JSON keeps the last of two equal
// keys, so a duplicate would otherwise vanish silently.
#include <cstdint>
#include <string>

#include "plexus/json_nesting.h"

namespace plexus {

// A safetensors header nests three levels (header, tensor entry, shape);
// deeper input is refused before it is built, so that nothing recursive
// (printing a value in an error message) can run out of stack.
inline constexpr int kMaxHeaderNesting = kMaxJsonNesting;

struct HeaderKeys {
  std::int64_t tensor_entries = 0;  // keys of the header object other than "__metadata__"
  std::string duplicate;            // the first key of the header object seen twice, or ""
  std::string json_error;           // why the text is not valid JSON, or ""
  bool too_deep = false;            // arrays and objects nest more than kMaxHeaderNesting levels
};

// Linear in the size of `text`: every key of the header object goes into
// one set, nested objects are skipped by depth. Stops collecting names
// (but keeps counting) once the count passes `max_tensor_entries`; stops
// reading at the first JSON error or nesting too deep.
HeaderKeys scan_header_keys(const std::string& text, std::int64_t max_tensor_entries);

}  // namespace plexus
