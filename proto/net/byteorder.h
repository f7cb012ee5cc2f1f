// Network byte order at the type level: a Be<T> field holds its value big-endian,
// is assigned from host values and read with host(). Alignment 1, so wire headers
// built from these types overlay any byte buffer.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>

namespace snic::net {

template <std::unsigned_integral T>
class Be {
  public:
    constexpr Be() = default;
    constexpr Be(T host_value) noexcept { set(host_value); }  // NOLINT: implicit on purpose

    constexpr T host() const noexcept {
        T v = 0;
        for (std::uint8_t b : bytes_) v = static_cast<T>((v << 8) | b);
        return v;
    }
    constexpr void set(T host_value) noexcept {
        for (std::size_t i = sizeof(T); i-- > 0;) {
            bytes_[i] = static_cast<std::uint8_t>(host_value);
            host_value = static_cast<T>(host_value >> 8);
        }
    }
    friend constexpr bool operator==(const Be&, const Be&) = default;

  private:
    std::array<std::uint8_t, sizeof(T)> bytes_;
};

using Be16 = Be<std::uint16_t>;
using Be32 = Be<std::uint32_t>;
using Be64 = Be<std::uint64_t>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(Be16{0x1234}.host() == 0x1234);

}  // namespace snic::net
