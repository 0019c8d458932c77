// GPT-2's byte alphabet (see tokenizer_byte_map.h).
#include "train/tokenizer_byte_map.h"

#include <array>
#include <cstdio>

namespace kiln::train::tok {
namespace {

// Every alphabet code point is below this: 256 + 68 remapped bytes = U+0144.
constexpr uint32_t kAlphabetEnd = 0x144;

bool is_printable_byte(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteMap {
  std::array<uint32_t, 256> code_point{};    // byte -> code point
  std::array<int16_t, kAlphabetEnd> byte{};  // code point -> byte, -1 when not in the alphabet
};

const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    m.byte.fill(-1);
    uint32_t next_remapped = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      m.code_point[b] = is_printable_byte(b) ? b : next_remapped++;
      m.byte[m.code_point[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

std::string code_point_name(uint32_t cp) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "U+%04X", cp);
  return buffer;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // every alphabet code point is below U+0800: two bytes
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

uint32_t byte_to_code_point(uint8_t byte) {
  return byte_map().code_point[byte];
}

Result<std::string> bytes_from_alphabet(std::string_view alphabet_text) {
  const ByteMap& map = byte_map();
  std::string bytes;
  bytes.reserve(alphabet_text.size());
  size_t i = 0;
  for (size_t offset = 0; i < alphabet_text.size(); ++offset) {
    const auto lead = static_cast<unsigned char>(alphabet_text[i]);
    // The sequence length from the lead byte; its payload bits start the code point.
    size_t size = 1;
    uint32_t cp = lead;
    if (lead >= 0xC2 && lead <= 0xDF) {
      size = 2;
      cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      size = 3;
      cp = lead & 0x0Fu;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      size = 4;
      cp = lead & 0x07u;
    } else if (lead >= 0x80) {
      size = 0;
    }
    for (size_t k = 1; size != 0 && k < size; ++k) {
      const auto byte =
          i + k < alphabet_text.size() ? static_cast<unsigned char>(alphabet_text[i + k]) : 0;
      if ((byte & 0xC0) != 0x80) {
        size = 0;
        break;
      }
      cp = (cp << 6) | (byte & 0x3Fu);
    }
    // An overlong form (more bytes than the code point needs) is not valid UTF-8 either.
    const size_t shortest = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (size == 0 || size != shortest) {
      return Status::invalid_argument("byte " + std::to_string(i) + " is not valid UTF-8");
    }
    if (cp >= kAlphabetEnd || map.byte[cp] < 0) {
      return Status::invalid_argument("character " + std::to_string(offset) + " (" +
                                      code_point_name(cp) + ") is outside GPT-2's byte alphabet");
    }
    bytes.push_back(static_cast<char>(map.byte[cp]));
    i += size;
  }
  return bytes;
}

std::string alphabet_from_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes)
    append_utf8(byte_to_code_point(static_cast<uint8_t>(c)), &out);
  return out;
}

}  // namespace kiln::train::tok
