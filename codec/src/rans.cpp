#include "plexus/codec/rans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "plexus/error.h"

namespace plexus::codec {

namespace {

constexpr std::uint32_t kLowerBound = 1u << 23;  // L: the state lives in [L, 2^31)
constexpr int kBypassLengthBits = 3;             // n - 1, n = 1..8 nibbles
constexpr int kBypassNibbleBits = 4;

std::uint32_t zigzag(std::int32_t value) {
  return (static_cast<std::uint32_t>(value) << 1) ^ static_cast<std::uint32_t>(value < 0 ? -1 : 0);
}

std::int32_t unzigzag(std::uint32_t code) {
  const std::uint32_t magnitude = code >> 1;
  return static_cast<std::int32_t>((code & 1u) ? ~magnitude : magnitude);
}

// One symbol (start, frequency) out of 2^bits onto the state, emitting
// bytes into `reversed` (the stream backwards).
void encode_symbol(std::uint32_t& state, std::uint32_t start, std::uint32_t frequency, int bits,
                   std::vector<std::uint8_t>& reversed) {
  const std::uint32_t state_max = ((kLowerBound >> bits) << 8) * frequency;
  while (state >= state_max) {
    reversed.push_back(static_cast<std::uint8_t>(state & 0xffu));
    state >>= 8;
  }
  state = ((state / frequency) << bits) + (state % frequency) + start;
}

bool in_table(std::int32_t value, const CodingTable& table) {
  return static_cast<std::int64_t>(value) >= table.min &&
         static_cast<std::int64_t>(value) < static_cast<std::int64_t>(table.min) + table.count();
}

}  // namespace

void check_table(const CodingTable& table, const std::string& who) {
  if (table.cdf.size() < 2)
    throw IoError(who + ": a coding table needs at least 2 cumulative entries, got " +
                  std::to_string(table.cdf.size()));
  if (table.count() > kMaxTableSymbols)
    throw IoError(who + ": " + std::to_string(table.count()) + " symbols, more than the " +
                  std::to_string(kMaxTableSymbols) + " a 16-bit table holds");
  if (static_cast<std::int64_t>(table.min) + table.count() > std::numeric_limits<std::int32_t>::max())
    throw IoError(who + ": symbols from " + std::to_string(table.min) + " on run past the 32-bit range");
  if (table.cdf.front() != 0)
    throw IoError(who + ": the cumulative table must start at 0, got " + std::to_string(table.cdf.front()));
  if (table.cdf.back() != kPrecisionTotal)
    throw IoError(who + ": the cumulative table must end at 65536, got " + std::to_string(table.cdf.back()));
  for (std::size_t i = 1; i < table.cdf.size(); ++i)
    if (table.cdf[i] <= table.cdf[i - 1])
      throw IoError(who + ": the cumulative table must rise strictly (every frequency >= 1), but entry " +
                    std::to_string(i) + " is " + std::to_string(table.cdf[i]) + " after " +
                    std::to_string(table.cdf[i - 1]));
}

CodingTable quantize_table(std::int32_t min, const std::vector<double>& probabilities, double escape_probability) {
  if (probabilities.size() > static_cast<std::size_t>(kMaxTableSymbols))
    throw ConfigError("coding table: " + std::to_string(probabilities.size()) + " symbols, more than the " +
                      std::to_string(kMaxTableSymbols) + " a 16-bit table holds");
  std::vector<double> mass = probabilities;
  mass.push_back(escape_probability);
  double total = 0;
  for (std::size_t i = 0; i < mass.size(); ++i) {
    if (!(mass[i] >= 0) || !std::isfinite(mass[i]))
      throw ConfigError("coding table: probability " + std::to_string(i) + " is " + std::to_string(mass[i]) +
                        ", not a finite number >= 0");
    total += mass[i];
  }
  if (!(total > 0)) throw ConfigError("coding table: every probability is zero");

  const std::size_t n = mass.size();
  const std::uint64_t shared = kPrecisionTotal - n;  // what is left after 1 each
  std::vector<std::uint64_t> frequency(n);
  std::vector<double> remainder(n);
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double share = mass[i] / total * static_cast<double>(shared);
    const double whole = std::min(std::floor(share), static_cast<double>(shared));
    frequency[i] = static_cast<std::uint64_t>(whole);
    remainder[i] = share - whole;
    given += frequency[i];
  }
  // Rounding can only leave less than n over; floating-point error could in
  // principle overshoot, so take back from the largest first.
  while (given > shared) {
    auto largest = std::max_element(frequency.begin(), frequency.end());
    --*largest;
    --given;
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t k = 0; given < shared; k = (k + 1) % n, ++given) ++frequency[order[k]];

  CodingTable table;
  table.min = min;
  table.cdf.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) table.cdf[i + 1] = table.cdf[i] + static_cast<std::uint32_t>(frequency[i] + 1);
  return table;
}

void RansEncoder::put(std::int32_t value, const CodingTable& table) { queue_.push_back({value, &table}); }

std::vector<std::uint8_t> RansEncoder::finish() {
  std::vector<std::uint8_t> reversed;
  reversed.reserve(queue_.size() / 2 + 16);
  std::uint32_t state = kLowerBound;
  for (auto item = queue_.rbegin(); item != queue_.rend(); ++item) {
    const CodingTable& table = *item->table;
    const std::int32_t count = table.count();
    if (in_table(item->value, table)) {
      const auto index = static_cast<std::size_t>(static_cast<std::int64_t>(item->value) - table.min);
      encode_symbol(state, table.cdf[index], table.cdf[index + 1] - table.cdf[index], kPrecisionBits, reversed);
      continue;
    }
    // The decoder reads escape, length, nibbles; so code them in reverse.
    const std::uint32_t code = zigzag(item->value);
    int nibbles = 1;
    while (nibbles < 8 && (code >> (kBypassNibbleBits * nibbles)) != 0) ++nibbles;
    for (int k = nibbles - 1; k >= 0; --k)
      encode_symbol(state, (code >> (kBypassNibbleBits * k)) & 0xfu, 1, kBypassNibbleBits, reversed);
    encode_symbol(state, static_cast<std::uint32_t>(nibbles - 1), 1, kBypassLengthBits, reversed);
    const auto escape = static_cast<std::size_t>(count);
    encode_symbol(state, table.cdf[escape], table.cdf[escape + 1] - table.cdf[escape], kPrecisionBits, reversed);
  }
  for (int shift = 24; shift >= 0; shift -= 8) reversed.push_back(static_cast<std::uint8_t>(state >> shift));
  queue_.clear();
  return {reversed.rbegin(), reversed.rend()};
}

RansDecoder::RansDecoder(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {
  if (size < 4)
    throw IoError("the coded stream is " + std::to_string(size) + " bytes, shorter than the 4-byte rANS state");
  for (int k = 0; k < 4; ++k) state_ |= static_cast<std::uint32_t>(data_[k]) << (8 * k);
  position_ = 4;
  if (state_ < kLowerBound || state_ >= (kLowerBound << 8))
    throw IoError("the coded stream starts with an rANS state out of range (corrupt stream)");
}

void RansDecoder::advance(std::uint32_t start, std::uint32_t frequency, int bits) {
  const std::uint32_t slot = state_ & ((1u << bits) - 1);
  state_ = frequency * (state_ >> bits) + slot - start;
  while (state_ < kLowerBound) {
    if (position_ == size_)
      throw IoError("the coded stream ends early: all " + std::to_string(size_) +
                    " bytes read and symbols remain (truncated or corrupt stream)");
    state_ = (state_ << 8) | data_[position_++];
  }
}

std::uint32_t RansDecoder::decode_bypass(int bits) {
  const std::uint32_t value = state_ & ((1u << bits) - 1);
  advance(value, 1, bits);
  return value;
}

std::int32_t RansDecoder::get(const CodingTable& table) {
  const std::uint32_t slot = state_ & (kPrecisionTotal - 1);
  // The symbol i with cdf[i] <= slot < cdf[i + 1]; cdf[0] = 0 and the last
  // entry is 2^16 > slot, so i is in [0, count].
  const auto above = std::upper_bound(table.cdf.begin(), table.cdf.end(), slot);
  const auto index = static_cast<std::size_t>(above - table.cdf.begin()) - 1;
  advance(table.cdf[index], table.cdf[index + 1] - table.cdf[index], kPrecisionBits);
  if (index < static_cast<std::size_t>(table.count()))
    return static_cast<std::int32_t>(static_cast<std::int64_t>(table.min) + static_cast<std::int64_t>(index));
  const int nibbles = static_cast<int>(decode_bypass(kBypassLengthBits)) + 1;
  std::uint32_t code = 0;
  std::uint32_t nibble = 0;
  for (int k = 0; k < nibbles; ++k) {
    nibble = decode_bypass(kBypassNibbleBits);
    code |= nibble << (kBypassNibbleBits * k);
  }
  if (nibbles > 1 && nibble == 0)
    throw IoError("the coded stream escapes a value with a leading zero nibble (corrupt stream)");
  const std::int32_t value = unzigzag(code);
  if (in_table(value, table))
    throw IoError("the coded stream escapes the value " + std::to_string(value) +
                  ", which its table codes directly (corrupt stream)");
  return value;
}

void RansDecoder::finish() const {
  if (position_ != size_)
    throw IoError("the coded stream has " + std::to_string(size_ - position_) +
                  " byte(s) left after its last symbol (corrupt or extended stream)");
  if (state_ != kLowerBound) throw IoError("the coded stream does not end in the rANS starting state (corrupt stream)");
}

}  // namespace plexus::codec
