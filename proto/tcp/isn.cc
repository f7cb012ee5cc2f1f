// The RFC 6528 ISN and the RFC 7323 timestamp offset.
#include "proto/tcp/isn.h"

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

}  // namespace snic::tcp
