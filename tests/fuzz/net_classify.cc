// libFuzzer target: proto/net's first checks of a received frame (classify). Asserts what
// the datapath relies on after it: a frame not dropped has its headers and its L4 segment
// inside the frame (offsets ordered, the segment within the bytes received), a UDP frame
// has room for the UDP header, and a drop always names its reason.
#include <cstddef>
#include <cstdint>
#include <span>

#include "proto/net/rx.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace snic::net;
    // Our address as in the captures of tests/vectors, and the frame as given; when the
    // input's first byte says so, the frame is re-addressed to us so that it passes the
    // Ethernet and IP checks and the fuzzer reaches the deeper ones.
    LocalIf local{MacAddr{{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}}, Ipv4Addr{0xc0a87a0b}};
    if (size == 0) return 0;
    const bool readdress = data[0] & 1;
    std::vector<std::uint8_t> frame(data + 1, data + size);
    if (readdress && frame.size() >= 34) {
        for (int i = 0; i < 6; ++i) frame[i] = local.mac.bytes[i];
        const std::uint32_t ip = local.ip.value;
        frame[30] = ip >> 24, frame[31] = ip >> 16, frame[32] = ip >> 8, frame[33] = ip;
    }
    const RxFrame f = classify(frame, local);
    if (f.kind == RxKind::drop) {
        SNIC_FUZZ_REQUIRE(f.drop != Drop::count_);
        return 0;
    }
    SNIC_FUZZ_REQUIRE(f.drop == Drop::count_);
    SNIC_FUZZ_REQUIRE(f.l3_offset >= 14 && f.l3_offset <= frame.size());
    if (f.kind == RxKind::udp || f.kind == RxKind::tcp || f.kind == RxKind::icmp_echo_request ||
        f.kind == RxKind::icmp_echo_reply || f.kind == RxKind::icmp_unreachable) {
        SNIC_FUZZ_REQUIRE(f.l4_offset >= f.l3_offset + 20);
        SNIC_FUZZ_REQUIRE(std::size_t{f.l4_offset} + f.l4_length <= frame.size());
    }
    if (f.kind == RxKind::udp) SNIC_FUZZ_REQUIRE(f.l4_length >= 8);
    if (f.kind == RxKind::tcp) SNIC_FUZZ_REQUIRE(f.l4_length >= 20);
    if (f.kind == RxKind::icmp_unreachable) SNIC_FUZZ_REQUIRE(f.l4_length >= 36);
    return 0;
}
