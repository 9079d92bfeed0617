#pragma once
// The options of a training command as one declarative table: each option
// is one row (its name, the member of the options struct it sets, its help,
// the values it accepts, and what --resume does with it). From the rows
// come the command-line options (option_table_cli.h), the settings saved
// in a checkpoint (save), their validation when read back (check_saved),
// their restore on --resume (restore) and the range checks of the values a
// run starts with (validate). The key of an option in the saved settings
// and in `given` is its name with '-' written '_' ("checkpoint-every" ->
// "checkpoint_every").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/error.h"

namespace plexus::train {

// What --resume does with an option.
enum class OnResume {
  kNotSaved,    // not in the checkpoint: given again or its default (--device, --time-limit)
  kMayChange,   // saved; restored unless given again, and may be given anew (--steps, --val)
  kChangesRun,  // saved; restored unless given again; given with another value, a warning says that the
                // resumed run no longer matches an uninterrupted one (--lr, --batch)
};

// The values a number (or each number of a list) may take. `max` bounds the
// values of the command line and the saved ones; `saved_max` only the saved
// ones (a step count of 10^18 is refused when read back, not when given).
struct Bounds {
  double min = -HUGE_VAL, max = HUGE_VAL;
  bool min_open = false, max_open = false;  // > min, < max
  bool finite = false;                      // infinity refused
  double saved_max = HUGE_VAL;
  std::string note;  // after the rule in command-line messages: " seconds", " (0: no clipping)"

  static Bounds in(double lo, double hi) {
    Bounds b;
    b.min = lo, b.max = hi;
    return b;
  }
  static Bounds open(double lo, double hi) {
    Bounds b = in(lo, hi);
    b.min_open = b.max_open = true;
    return b;
  }
  static Bounds at_least(double lo) { return in(lo, HUGE_VAL); }
  static Bounds above(double lo) {
    Bounds b = at_least(lo);
    b.min_open = true;
    return b;
  }
  Bounds& finite_only() { return finite = true, *this; }
  Bounds& saved_at_most(double hi) { return saved_max = hi, *this; }
  Bounds& with_note(std::string text) { return note = std::move(text), *this; }
};

// A saved list holds at most this many values (a corrupt checkpoint cannot ask for more).
inline constexpr std::size_t kMaxSavedListSize = 1000;

// The texts of the table's messages (option_table.cpp).
namespace option_text {
// "in [1, 65536]", "> 0", ">= 0", "in (0, 1)"; `saved`: with saved_max.
std::string rule(const Bounds& bounds, bool saved);
bool within(const Bounds& bounds, double value, bool saved);
// ConfigError "--<name> must be <rule><note>, got <value>".
[[noreturn]] void refuse_value(const std::string& name, const Bounds& bounds, const std::string& value);
// IoError "<source>: at /<key>: must be <what>, got <saved value>".
[[noreturn]] void refuse_saved(const std::string& source, const std::string& key, const std::string& what,
                               const nlohmann::json& value);
// The warning for an option given on --resume with a value other than the checkpoint's.
void warn_differs(const std::string& key, const nlohmann::json& given, const nlohmann::json& saved);
}  // namespace option_text

template <class Options>
struct OptionRow {
  using Member = std::variant<std::string Options::*, double Options::*, int Options::*, std::int64_t Options::*,
                              std::uint64_t Options::*, bool Options::*, std::vector<double> Options::*,
                              std::vector<std::string> Options::*>;

  std::string name;  // the long option without "--"
  Member member;
  std::string help;
  OnResume on_resume = OnResume::kNotSaved;
  bool has_bounds = false;
  Bounds bounds;  // numbers and lists of numbers, when has_bounds
  // CLI11 checks `bounds` while parsing, with its own message (the option's
  // values are then not checked again by validate()).
  bool bounds_checked_when_parsed = false;
  std::string type_name;  // CLI11's ("DIR"); empty: its default
  // A string: the values CLI11 accepts. A bool: empty for a flag (--resume),
  // else the words for true and false (--cuda-graph on|off).
  std::vector<std::string> choices;

  std::string key() const {
    std::string key = name;
    for (char& c : key)
      if (c == '-') c = '_';
    return key;
  }
  bool saved() const { return on_resume != OnResume::kNotSaved; }

  // The declaration's words, chained after OptionTable::add.
  OptionRow& changes_the_run() { return on_resume = OnResume::kChangesRun, *this; }
  OptionRow& may_change_on_resume() { return on_resume = OnResume::kMayChange, *this; }
  OptionRow& range(Bounds b) { return has_bounds = true, bounds = std::move(b), *this; }
  OptionRow& range_checked_when_parsed(Bounds b) {
    range(std::move(b));
    bounds_checked_when_parsed = true;
    return *this;
  }
  OptionRow& type(std::string text) { return type_name = std::move(text), *this; }
  OptionRow& one_of(std::vector<std::string> values) { return choices = std::move(values), *this; }
};

template <class Options>
class OptionTable {
 public:
  using Row = OptionRow<Options>;

  // Declares option `--name`; its other words are chained on the row (.changes_the_run().range(...)).
  Row& add(const std::string& name, typename Row::Member member, const std::string& help) {
    Row row;
    row.name = name;
    row.member = member;
    row.help = help;
    rows_.push_back(std::move(row));
    return rows_.back();
  }
  const std::vector<Row>& rows() const { return rows_; }
  const Row* find(const std::string& key) const {
    for (const Row& row : rows_)
      if (row.key() == key) return &row;
    return nullptr;
  }

  // The saved settings: every saved option's value under its key.
  nlohmann::json save(const Options& options) const {
    nlohmann::json saved = nlohmann::json::object();
    for (const Row& row : rows_)
      if (row.saved()) std::visit([&](auto member) { saved[row.key()] = options.*member; }, row.member);
    return saved;
  }

  // Throws IoError "<source>: at /<key>: must be ..." for a saved setting of
  // the wrong type or out of range, so that a tampered or corrupt checkpoint
  // is refused before anything is built. Absent keys are fine (the default).
  void check_saved(const nlohmann::json& saved, const std::string& source) const {
    for (const Row& row : rows_) {
      if (!row.saved() || !saved.contains(row.key())) continue;
      std::visit(
          [&](auto member) { check_saved_value<MemberType<decltype(member)>>(row, saved.at(row.key()), source); },
          row.member);
    }
  }

  // Fills every saved option not in `given` (the keys of the options set on
  // the command line) from `saved` (checked by check_saved), and warns for
  // those given with a value other than the saved one where it changes the run.
  void restore(Options& options, const nlohmann::json& saved, const std::set<std::string>& given) const {
    for (const Row& row : rows_) {
      if (!row.saved() || !saved.contains(row.key())) continue;
      std::visit(
          [&](auto member) {
            using T = MemberType<decltype(member)>;
            const T saved_value = saved.at(row.key()).template get<T>();
            if (!given.count(row.key())) options.*member = saved_value;
            else if (row.on_resume == OnResume::kChangesRun && options.*member != saved_value)
              option_text::warn_differs(row.key(), options.*member, saved_value);
          },
          row.member);
    }
  }

  // Throws ConfigError "--<name> must be ..., got ..." for the first number
  // out of its row's bounds (lists are the command's to check).
  void validate(const Options& options) const {
    for (const Row& row : rows_) {
      if (!row.has_bounds || row.bounds_checked_when_parsed) continue;
      std::visit(
          [&](auto member) {
            using T = MemberType<decltype(member)>;
            if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
              const T value = options.*member;
              if (!option_text::within(row.bounds, static_cast<double>(value), false))
                option_text::refuse_value(row.name, row.bounds, std::to_string(value));
            }
          },
          row.member);
    }
  }

 private:
  template <class M>
  struct MemberOf;
  template <class T>
  struct MemberOf<T Options::*> {
    using type = T;
  };
  template <class M>
  using MemberType = typename MemberOf<M>::type;

  template <class T>
  static void check_saved_value(const Row& row, const nlohmann::json& value, const std::string& source) {
    const std::string key = row.key();
    if constexpr (std::is_same_v<T, std::string>) {
      if (!value.is_string()) option_text::refuse_saved(source, key, "a string", value);
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!value.is_boolean()) option_text::refuse_saved(source, key, "true or false", value);
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      if (!row.has_bounds) {  // any unsigned 64-bit value
        if (!value.is_number_unsigned()) option_text::refuse_saved(source, key, "an integer in [0, 2^64 - 1]", value);
        return;
      }
      check_saved_integer<T>(row, value, source);
    } else if constexpr (std::is_integral_v<T>) {
      check_saved_integer<T>(row, value, source);
    } else if constexpr (std::is_same_v<T, double>) {
      const Bounds bounds = row.has_bounds ? row.bounds : Bounds{};
      if (!value.is_number() || !option_text::within(bounds, value.get<double>(), true))
        option_text::refuse_saved(source, key, number_text(bounds, "a ", "number"), value);
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      const Bounds bounds = row.has_bounds ? row.bounds : Bounds{};
      bool valid = value.is_array() && value.size() <= kMaxSavedListSize;
      for (std::size_t i = 0; valid && i < value.size(); ++i)
        valid = value[i].is_number() && option_text::within(bounds, value[i].get<double>(), true);
      if (!valid)
        option_text::refuse_saved(
            source, key,
            "a list of at most " + std::to_string(kMaxSavedListSize) + " " + number_text(bounds, "", "numbers"), value);
    } else {
      static_assert(std::is_same_v<T, std::vector<std::string>>);
      bool valid = value.is_array();
      for (std::size_t i = 0; valid && i < value.size(); ++i) valid = value[i].is_string();
      if (!valid) option_text::refuse_saved(source, key, "a list of strings", value);
    }
  }

  // An integer of type T within the row's bounds.
  template <class T>
  static void check_saved_integer(const Row& row, const nlohmann::json& value, const std::string& source) {
    bool valid = value.is_number_integer();
    if (valid && value.is_number_unsigned())
      valid = value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    else if (valid) {
      const std::int64_t v = value.get<std::int64_t>();
      valid = v >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
              (v < 0 || static_cast<std::uint64_t>(v) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max()));
    }
    std::string rule = "in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                       std::to_string(std::numeric_limits<T>::max()) + "]";
    if (row.has_bounds) {  // bounds of whole numbers, exact as doubles
      Bounds bounds = row.bounds;
      bounds.min = std::max(bounds.min, static_cast<double>(std::numeric_limits<T>::min()));
      bounds.max = std::min(bounds.max, static_cast<double>(std::numeric_limits<T>::max()));
      valid = valid && option_text::within(bounds,
                                           value.is_number_unsigned() ? static_cast<double>(value.get<std::uint64_t>())
                                                                      : static_cast<double>(value.get<std::int64_t>()),
                                           true);
      rule = option_text::rule(bounds, true);
    }
    if (!valid) option_text::refuse_saved(source, row.key(), "an integer " + rule, value);
  }

  // "a finite number > 0", "numbers >= 0", "a number".
  static std::string number_text(const Bounds& bounds, const std::string& article, const std::string& noun) {
    std::string text = article + (bounds.finite ? "finite " : "") + noun;
    const std::string rule = option_text::rule(bounds, true);
    return rule.empty() ? text : text + " " + rule;
  }

  std::vector<Row> rows_;
};

}  // namespace plexus::train
