// libFuzzer target: proto/roce's parse() of a RoCEv2 transport packet. Asserts that an
// accepted packet's views lie inside the buffer (headers, payload, pad and ICRC add up to
// its length) and that it round-trips: build() from the fields parse() read writes the same
// bytes (the ICRC and pad bytes aside, which build() zeroes).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/roce/packet.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace snic::roce;
    const std::span<const std::uint8_t> in(data, size);
    const Packet p = parse(in);
    if (!p.ok()) return 0;
    SNIC_FUZZ_REQUIRE(p.info != nullptr && p.base == data);
    const std::size_t hdr = p.info->length;
    SNIC_FUZZ_REQUIRE(p.payload.data() == data + hdr);
    SNIC_FUZZ_REQUIRE(hdr + p.payload.size() + p.pad + kIcrcLen == size);
    SNIC_FUZZ_REQUIRE(p.pad < 4 && (hdr + p.payload.size() + p.pad) % 4 == 0);

    PacketSpec s;
    s.opcode = static_cast<Opcode>(p.opcode());
    const Bth& b = p.bth();
    s.solicited = b.solicited();
    s.mig_req = b.mig_req();
    s.fecn = b.fecn();
    s.becn = b.becn();
    s.ack_req = b.ack_req();
    s.pkey = b.pkey.host();
    s.dest_qp = b.dest_qp.host();
    s.psn = b.psn.host();
    if (auto* h = p.deth()) s.deth = *h;
    if (auto* h = p.reth()) s.reth = *h;
    if (auto* h = p.atomic_eth()) s.atomic_eth = *h;
    if (auto* h = p.aeth()) s.aeth = *h;
    if (auto* h = p.atomic_ack_eth()) s.atomic_ack_eth = *h;
    if (auto* h = p.immdt()) s.immdt = *h;
    if (auto* h = p.ieth()) s.ieth = *h;
    s.payload = p.payload;
    std::vector<std::uint8_t> out(transport_length(s.opcode, p.payload.size()));
    const std::size_t n = build(out, s);
    SNIC_FUZZ_REQUIRE(n == size);
    // The BTH's reserved bits and TVer (0, checked) and every extension header are as parsed.
    std::vector<std::uint8_t> want(data, data + hdr + p.payload.size());
    std::vector<std::uint8_t> got(out.begin(), out.begin() + static_cast<long>(want.size()));
    // Bits build() sets by rule rather than copying: the BTH's reserved fields (byte 4 and the
    // 7 bits above the PSN) and the PadCnt it derives from the payload.
    for (auto* v : {&want, &got}) {
        (*v)[1] &= static_cast<std::uint8_t>(~0x30);  // PadCnt
        (*v)[4] &= 0xC0;                              // FECN, BECN kept
        (*v)[8] &= 0x80;
    }
    SNIC_FUZZ_REQUIRE(want == got);
    return 0;
}
