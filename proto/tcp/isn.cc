// The RFC 6528 ISN and the RFC 7323 timestamp offset.
#include "proto/tcp/isn.h"

#include <algorithm>

namespace snic::tcp {

namespace {

// The tuple as hashed: tag, local address and port, remote address and port.
std::array<std::uint8_t, 37> tuple_bytes(std::uint8_t tag, const Endpoint& local,
                                         const Endpoint& remote) {
    std::array<std::uint8_t, 37> b{};
    b[0] = tag;
    for (std::size_t i = 0; i < 16; ++i) b[1 + i] = local.addr.bytes[i];
    b[17] = static_cast<std::uint8_t>(local.port >> 8);
    b[18] = static_cast<std::uint8_t>(local.port);
    for (std::size_t i = 0; i < 16; ++i) b[19 + i] = remote.addr.bytes[i];
    b[35] = static_cast<std::uint8_t>(remote.port >> 8);
    b[36] = static_cast<std::uint8_t>(remote.port);
    return b;
}

}  // namespace

Seq initial_sequence(const IsnKey& key, const Endpoint& local, const Endpoint& remote,
                     std::uint64_t now_ns) {
    const auto b = tuple_bytes(0, local, remote);
    return static_cast<Seq>(now_ns / 4000) + static_cast<Seq>(siphash24(key, b));
}

std::uint32_t timestamp_offset(const IsnKey& key, const Endpoint& local, const Endpoint& remote) {
    const auto b = tuple_bytes(1, local, remote);
    return static_cast<std::uint32_t>(siphash24(key, b));
}

namespace {

// The 28 bits of a cookie that authenticate it (bits 31..4).
std::uint32_t cookie_mac(const IsnKey& key, const Endpoint& local, const Endpoint& remote,
                         Seq peer_isn, std::uint64_t slot, std::uint8_t mss_index) {
    std::array<std::uint8_t, 37 + 4 + 8 + 1> b{};
    const auto t = tuple_bytes(2, local, remote);
    std::copy(t.begin(), t.end(), b.begin());
    for (std::size_t i = 0; i < 4; ++i) b[37 + i] = static_cast<std::uint8_t>(peer_isn >> (8 * i));
    for (std::size_t i = 0; i < 8; ++i) b[41 + i] = static_cast<std::uint8_t>(slot >> (8 * i));
    b[49] = mss_index;
    return static_cast<std::uint32_t>(siphash24(key, b) >> 32) & ~0xfu;
}

}  // namespace

std::uint8_t cookie_mss_index(std::uint32_t mss) {
    std::uint8_t i = 0;
    while (i + 1u < kCookieMss.size() && kCookieMss[i + 1u] <= mss) ++i;
    return i;
}

Seq make_syn_cookie(const IsnKey& key, const Endpoint& local, const Endpoint& remote, Seq peer_isn,
                    std::uint64_t slot, std::uint8_t mss_index) {
    mss_index &= 7;
    return cookie_mac(key, local, remote, peer_isn, slot, mss_index) |
           static_cast<std::uint32_t>(slot & 1) << 3 | mss_index;
}

std::uint16_t check_syn_cookie(const IsnKey& key, const Endpoint& local, const Endpoint& remote,
                               Seq peer_isn, Seq cookie, std::uint64_t slot) {
    // Bit 3 says whether the cookie is of this slot or the one before; anything older has
    // the same bit as a cookie two slots back, and its MAC (over the wrong slot) fails.
    const std::uint64_t made = (slot & 1) == ((cookie >> 3) & 1) ? slot : slot - 1;
    if (made > slot) return 0;  // slot 0: no slot before it
    const auto mss_index = static_cast<std::uint8_t>(cookie & 7);
    if ((cookie & ~0xfu) != cookie_mac(key, local, remote, peer_isn, made, mss_index)) return 0;
    return kCookieMss[mss_index];
}

}  // namespace snic::tcp
