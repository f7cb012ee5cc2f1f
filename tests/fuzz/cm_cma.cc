// libFuzzer target: proto/cm's rdma_cm conventions: the cma header of REQ and SIDR_REQ
// private data (decode_cma_header) and the IP service IDs (ip_service), and the IPv4-mapped
// GIDs. Asserts round trips: a header that decodes encodes back to the same 36 bytes (the
// fields it keeps: version 0, IPv4, ports, addresses; the rest as encode writes it), a
// service ID that names an IP port space is service_id(ps, port), a GID that maps to IPv4 is
// gid_from_ipv4 of that address.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/cm/cma.h"
#include "proto/cm/messages.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace snic::cm;
    const std::span<const std::uint8_t> in(data, size);
    if (const auto h = decode_cma_header(in)) {
        SNIC_FUZZ_REQUIRE(size >= kCmaHeaderSize);
        std::array<std::uint8_t, kCmaHeaderSize> out{};
        SNIC_FUZZ_REQUIRE(encode_cma_header(*h, out));
        const auto again = decode_cma_header(out);
        SNIC_FUZZ_REQUIRE(again && again->src_port == h->src_port && again->src_ip == h->src_ip &&
                          again->dst_ip == h->dst_ip);
        // The bytes that carry the fields are the input's.
        SNIC_FUZZ_REQUIRE(std::memcmp(out.data() + 2, data + 2, 2) == 0);
        SNIC_FUZZ_REQUIRE(std::memcmp(out.data() + 16, data + 16, 4) == 0);
        SNIC_FUZZ_REQUIRE(std::memcmp(out.data() + 32, data + 32, 4) == 0);
    }
    std::array<std::uint8_t, kCmaHeaderSize> small{};
    SNIC_FUZZ_REQUIRE(!encode_cma_header(CmaHeader{}, std::span(small).first(kCmaHeaderSize - 1)));
    if (size >= 8) {
        std::uint64_t sid;
        std::memcpy(&sid, data, sizeof sid);
        if (const auto s = ip_service(sid)) SNIC_FUZZ_REQUIRE(service_id(s->ps, s->port) == sid);
    }
    if (size >= 16) {
        Gid g;
        std::memcpy(g.data(), data, g.size());
        if (const auto ip = ipv4_from_gid(g)) SNIC_FUZZ_REQUIRE(gid_from_ipv4(*ip) == g);
    }
    return 0;
}
