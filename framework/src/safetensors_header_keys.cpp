#include "safetensors_header_keys.h"

#include <unordered_set>

#include <nlohmann/json.hpp>

namespace plexus {

namespace {

// A SAX handler: the depth of the value being read tells which object a key
// belongs to (depth 1 is the header object's own keys).
class HeaderKeyHandler : public nlohmann::json::json_sax_t {
 public:
  HeaderKeyHandler(HeaderKeys& result, std::int64_t max_tensor_entries)
      : result_(result), max_tensor_entries_(max_tensor_entries) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return --depth_, true; }

  bool key(string_t& name) override {
    if (depth_ != 1) return true;
    if (name != "__metadata__") ++result_.tensor_entries;
    if (result_.tensor_entries <= max_tensor_entries_ && result_.duplicate.empty() && !names_.insert(name).second)
      result_.duplicate = name;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& error) override {
    result_.json_error = error.what();
    return false;
  }

 private:
  bool enter() {
    if (++depth_ <= kMaxHeaderNesting) return true;
    result_.too_deep = true;
    return false;
  }

  HeaderKeys& result_;
  const std::int64_t max_tensor_entries_;
  int depth_ = 0;
  std::unordered_set<std::string> names_;
};

}  // namespace

HeaderKeys scan_header_keys(const std::string& text, std::int64_t max_tensor_entries) {
  HeaderKeys result;
  HeaderKeyHandler handler(result, max_tensor_entries);
  nlohmann::json::sax_parse(text, &handler);
  return result;
}

}  // namespace plexus
