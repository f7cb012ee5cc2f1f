// Network byte order at the type level: a Be<T> field holds its value big-endian,
// is assigned from host values and read with host(). Alignment 1, so wire headers
// built from these types overlay any byte buffer.
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace snic::net {

template <std::unsigned_integral T>
class Be {
  public:
    constexpr Be() = default;
    constexpr Be(T host_value) noexcept { set(host_value); }  // NOLINT: implicit on purpose

    // Outside constant evaluation one load or store and a byte swap: the loops below are what
    // they mean, but GCC at -O2 does not always merge them (they cost the responder about 190
    // instructions per WRITE packet).
    constexpr T host() const noexcept {
        if (std::is_constant_evaluated()) {
            T v = 0;
            for (std::uint8_t b : bytes_) v = static_cast<T>((v << 8) | b);
            return v;
        }
        T v;
        std::memcpy(&v, bytes_.data(), sizeof v);
        return to_big(v);
    }
    constexpr void set(T host_value) noexcept {
        if (std::is_constant_evaluated()) {
            for (std::size_t i = sizeof(T); i-- > 0;) {
                bytes_[i] = static_cast<std::uint8_t>(host_value);
                host_value = static_cast<T>(host_value >> 8);
            }
            return;
        }
        const T v = to_big(host_value);
        std::memcpy(bytes_.data(), &v, sizeof v);
    }
    friend constexpr bool operator==(const Be&, const Be&) = default;

  private:
    // Network (big-endian) order from host order and back: the same swap.
    static T to_big(T v) noexcept {
        if constexpr (std::endian::native == std::endian::big || sizeof(T) == 1)
            return v;
        else if constexpr (sizeof(T) == 2)
            return __builtin_bswap16(v);
        else if constexpr (sizeof(T) == 4)
            return __builtin_bswap32(v);
        else
            return __builtin_bswap64(v);
    }

    std::array<std::uint8_t, sizeof(T)> bytes_;
};

using Be16 = Be<std::uint16_t>;
using Be32 = Be<std::uint32_t>;
using Be64 = Be<std::uint64_t>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(Be16{0x1234}.host() == 0x1234);

}  // namespace snic::net
