// A field of a MAD as IBA's message tables give it: byte offset, bit offset from the most
// significant bit of that byte (the Byte[Bit] notation of IBA vol 1 §12.6), and width in
// bits (1..64). Fields are read and written big-endian; a field may cross byte boundaries.
// The message codecs (messages.cc) are tables of these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace snic::cm {

struct Field {
    std::uint16_t byte;
    std::uint8_t bit;
    std::uint8_t width;

    // Checked where a table is written: a bad row does not compile.
    consteval Field(std::uint16_t byte_, std::uint8_t bit_, std::uint8_t width_)
        : byte(byte_), bit(bit_), width(width_) {
        if (bit_ > 7 || width_ == 0 || width_ > 64 || bit_ + width_ > 64) throw "bad field";
    }
    constexpr std::size_t bytes() const { return (bit + width + 7u) / 8u; }
    constexpr std::size_t end() const { return byte + bytes(); }
};

inline std::uint64_t get_field(std::span<const std::uint8_t> buf, Field f) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < f.bytes(); ++i) v = (v << 8) | buf[f.byte + i];
    v >>= f.bytes() * 8 - f.bit - f.width;
    return f.width == 64 ? v : v & ((std::uint64_t{1} << f.width) - 1);
}

inline void set_field(std::span<std::uint8_t> buf, Field f, std::uint64_t value) {
    const std::size_t n = f.bytes();
    const unsigned shift = static_cast<unsigned>(n * 8 - f.bit - f.width);
    const std::uint64_t mask =
        f.width == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << f.width) - 1;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | buf[f.byte + i];
    v = (v & ~(mask << shift)) | ((value & mask) << shift);
    for (std::size_t i = n; i-- > 0;) {
        buf[f.byte + i] = static_cast<std::uint8_t>(v);
        v >>= 8;
    }
}

}  // namespace snic::cm
