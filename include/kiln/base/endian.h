// Fixed-width little-endian integers: the one encoding every Kiln file and wire format uses
// (token shards, safetensors lengths, store frames, TCP frames, the mesh handshake).
//
// Each byte is placed by shifts, never by copying a host integer, so the bytes are the same on a
// big-endian host; on x86-64 and aarch64 the compiler turns each function into one load or store.
// The pointers need no alignment. Not for arrays of tensor data: those are copied as raw bytes by
// the formats that state the host is little-endian.
#ifndef KILN_BASE_ENDIAN_H_
#define KILN_BASE_ENDIAN_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

namespace endian_internal {

template <typename T>
inline void encode_le(T v, void* out) {
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < sizeof(T); ++i)
    p[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
}

template <typename T>
inline T decode_le(const void* in) {
  const auto* p = static_cast<const unsigned char*>(in);
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v = static_cast<T>(v | static_cast<T>(static_cast<T>(p[i]) << (8 * i)));
  return v;
}

}  // namespace endian_internal

// Writes `v` as 2, 4 or 8 bytes at `out`, least significant byte first.
inline void encode_u16_le(uint16_t v, void* out) {
  endian_internal::encode_le(v, out);
}
inline void encode_u32_le(uint32_t v, void* out) {
  endian_internal::encode_le(v, out);
}
inline void encode_u64_le(uint64_t v, void* out) {
  endian_internal::encode_le(v, out);
}

// Reads 2, 4 or 8 bytes at `in`, least significant byte first.
inline uint16_t decode_u16_le(const void* in) {
  return endian_internal::decode_le<uint16_t>(in);
}
inline uint32_t decode_u32_le(const void* in) {
  return endian_internal::decode_le<uint32_t>(in);
}
inline uint64_t decode_u64_le(const void* in) {
  return endian_internal::decode_le<uint64_t>(in);
}

// Appends `v` to `out` in the same encoding.
inline void append_u32_le(std::string* out, uint32_t v) {
  char bytes[4];
  encode_u32_le(v, bytes);
  out->append(bytes, sizeof(bytes));
}
inline void append_u64_le(std::string* out, uint64_t v) {
  char bytes[8];
  encode_u64_le(v, bytes);
  out->append(bytes, sizeof(bytes));
}

}  // namespace kiln

#endif  // KILN_BASE_ENDIAN_H_
