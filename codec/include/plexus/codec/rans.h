#pragma once
// A byte-wise rANS entropy coder (Duda, "Asymmetric numeral systems", 2013;
// the state layout of Giesen's public-domain ryg_rans): integer arithmetic
// only, frequency tables of 16-bit precision, and an escape code so that any
// 32-bit integer can be coded, however far outside its table it lies.
//
// State x in [L, 2^31), L = 2^23; bytes move one at a time. Coding a symbol
// of frequency f starting at cumulative s, in a table of total 2^b:
//   encode: while x >= (L >> b) * 2^8 * f: emit the low byte of x, x >>= 8
//           x = (x / f) * 2^b + (x mod f) + s
//   decode: slot = x mod 2^b, the symbol whose [s, s + f) holds slot,
//           x = f * (x >> b) + slot - s, then while x < L: x = x * 2^8 + next byte
// rANS decodes in the reverse order of encoding, so the encoder queues the
// symbols and codes them backwards in finish(); the stream it returns starts
// with the final state (4 bytes, little-endian) and is read forwards.
//
// An escaped value v (outside the table) is coded as the table's escape
// symbol, then, with uniform "bypass" frequencies, n - 1 in 3 bits and the
// n 4-bit nibbles (least significant first) of zigzag(v) = (v << 1) ^ (v >> 31),
// n = 1..8 the fewest nibbles that hold it.
//
// The decoder never reads outside its buffer and never loops unboundedly:
// running out of bytes, an escape that codes an in-range value, or a final
// state or byte count that is not exactly the encoder's start throws IoError
// saying what is wrong.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::codec {

inline constexpr int kPrecisionBits = 16;
inline constexpr std::uint32_t kPrecisionTotal = 1u << kPrecisionBits;  // frequencies sum to this
// The most in-range symbols a table may have (every symbol and the escape
// need a frequency >= 1 out of 2^16).
inline constexpr std::int32_t kMaxTableSymbols = 4095;

// A quantised cumulative distribution over the integers [min, min + count)
// plus an escape symbol for everything else. cdf has count + 2 entries:
// cdf[0] = 0, cdf[i + 1] - cdf[i] >= 1 is the frequency of min + i,
// cdf[count + 1] - cdf[count] that of the escape, cdf[count + 1] = 2^16.
struct CodingTable {
  std::int32_t min = 0;
  std::vector<std::uint32_t> cdf{0, kPrecisionTotal};  // by default: everything escapes

  std::int32_t count() const { return static_cast<std::int32_t>(cdf.size()) - 2; }
};

// Throws IoError starting with `who` when `table` breaks any rule above
// (or has more than kMaxTableSymbols symbols, or min + count overflows).
void check_table(const CodingTable& table, const std::string& who);

// Frequencies proportional to `probabilities` (of min, min + 1, ...) and
// `escape_probability`, each at least 1, summing to 2^16: every symbol gets
// 1, the rest is shared in proportion, and what rounding down leaves over
// goes to the largest remainders (ties to the lower index). Deterministic.
// Throws ConfigError when a probability is negative or not finite, when all
// are zero, or when there are more than kMaxTableSymbols.
CodingTable quantize_table(std::int32_t min, const std::vector<double>& probabilities, double escape_probability);

class RansEncoder {
 public:
  // Queues `value`; `table` must stay alive until finish().
  void put(std::int32_t value, const CodingTable& table);
  std::size_t queued() const { return queue_.size(); }
  // Codes every queued value and returns the stream (at least 4 bytes);
  // the encoder is empty again afterwards.
  std::vector<std::uint8_t> finish();

 private:
  struct Queued {
    std::int32_t value;
    const CodingTable* table;
  };
  std::vector<Queued> queue_;
};

class RansDecoder {
 public:
  // Reads the initial state: IoError when fewer than 4 bytes or the state
  // is out of range. The bytes must outlive the decoder.
  RansDecoder(const std::uint8_t* data, std::size_t size);
  std::int32_t get(const CodingTable& table);
  // IoError unless the stream ended exactly: every byte read and the state
  // back at the encoder's starting value.
  void finish() const;

 private:
  std::uint32_t decode_bypass(int bits);
  void advance(std::uint32_t start, std::uint32_t frequency, int bits);
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
  std::uint32_t state_ = 0;
};

}  // namespace plexus::codec
