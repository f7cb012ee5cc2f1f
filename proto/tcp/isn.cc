// SipHash-2-4 and the RFC 6528 ISN.
#include "proto/tcp/isn.h"

namespace snic::tcp {

namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) {
    return (x << b) | (x >> (64 - b));
}

std::uint64_t load64le(const std::uint8_t* p, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{p[i]} << (8 * i);
    return v;
}

struct SipState {
    std::uint64_t v0, v1, v2, v3;

    void round() {
        v0 += v1;
        v1 = rotl(v1, 13);
        v1 ^= v0;
        v0 = rotl(v0, 32);
        v2 += v3;
        v3 = rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotl(v1, 17);
        v1 ^= v2;
        v2 = rotl(v2, 32);
    }
    void absorb(std::uint64_t m) {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }
};

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

std::uint64_t siphash24(const IsnKey& key, std::span<const std::uint8_t> data) {
    const std::uint64_t k0 = load64le(key.data(), 8);
    const std::uint64_t k1 = load64le(key.data() + 8, 8);
    SipState s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
               k1 ^ 0x7465646279746573ull};
    const std::size_t whole = data.size() / 8 * 8;
    for (std::size_t i = 0; i < whole; i += 8) s.absorb(load64le(data.data() + i, 8));
    s.absorb(load64le(data.data() + whole, data.size() - whole) |
             (std::uint64_t{data.size() & 0xff} << 56));
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) s.round();
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

Seq initial_sequence(const IsnKey& key, const Endpoint& local, const Endpoint& remote,
                     std::uint64_t now_ns) {
    const auto b = tuple_bytes(0, local, remote);
    return static_cast<Seq>(now_ns / 4000) + static_cast<Seq>(siphash24(key, b));
}

std::uint32_t timestamp_offset(const IsnKey& key, const Endpoint& local, const Endpoint& remote) {
    const auto b = tuple_bytes(1, local, remote);
    return static_cast<std::uint32_t>(siphash24(key, b));
}

}  // namespace snic::tcp
