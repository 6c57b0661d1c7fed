// ONNX stores the sub-byte element types (4-bit, 2-bit, 6-bit; see dtype_packed_bits)
// packed: element i takes bits [i * bits, (i + 1) * bits) of a little-endian bit stream
// (4-bit: element 0 in the low nibble), the last byte padded with zeros. The engine keeps
// one element per byte, its bits in the low bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ortmodule {

inline size_t packed_size(int64_t n, int bits) { return static_cast<size_t>((n * bits + 7) / 8); }

// src: packed_size(n, bits) bytes -> dst: n bytes.
inline void unpack_bits(const uint8_t* src, int64_t n, int bits, uint8_t* dst) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    uint32_t word = src[bit / 8];
    if (bit % 8 + bits > 8) word |= static_cast<uint32_t>(src[bit / 8 + 1]) << 8;
    dst[i] = static_cast<uint8_t>((word >> (bit % 8)) & mask);
  }
}

// src: n bytes (the low `bits` of each) -> packed_size(n, bits) bytes.
inline std::string pack_bits(const uint8_t* src, int64_t n, int bits) {
  std::string out(packed_size(n, bits), '\0');
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const uint32_t v = (src[i] & mask) << (bit % 8);
    out[bit / 8] = static_cast<char>(static_cast<uint8_t>(out[bit / 8]) | (v & 0xff));
    if (v > 0xff)
      out[bit / 8 + 1] = static_cast<char>(static_cast<uint8_t>(out[bit / 8 + 1]) | (v >> 8));
  }
  return out;
}

}  // namespace ortmodule
