// libFuzzer target: proto/cm's MAD header check (parse_mad) and the CM message codecs
// (decode<M> for REQ, MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR, SIDR_REQ, SIDR_REP), fed
// whole MADs. Asserts the round trips: a header parse_mad accepts is written back by
// write_mad_header byte for byte (its reserved bytes aside); every message decodes from any
// 232 bytes or says it cannot, and what it decodes encodes to bytes that decode and encode
// again to the same bytes (the codec loses nothing it keeps).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/cm/mad.h"
#include "proto/cm/messages.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace snic::cm;

template <typename M>
void round_trip(ConstMadData data) {
    const std::optional<M> m = decode<M>(data);
    if (!m) return;
    std::array<std::uint8_t, kMadDataSize> once{}, twice{};
    encode(*m, MadData(once));
    const std::optional<M> again = decode<M>(ConstMadData(once));
    SNIC_FUZZ_REQUIRE(again.has_value());
    encode(*again, MadData(twice));
    SNIC_FUZZ_REQUIRE(once == twice);
    // build_mad frames it under a header parse_mad accepts, with the message's attribute.
    const Mad mad = build_mad(0x1234, *m);
    MadView v;
    SNIC_FUZZ_REQUIRE(parse_mad(mad, v) == MadDrop::ok);
    SNIC_FUZZ_REQUIRE(v.hdr.attr_id == static_cast<std::uint16_t>(M::kAttr));
    SNIC_FUZZ_REQUIRE(std::memcmp(v.data.data(), once.data(), kMadDataSize) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::uint8_t> in(data, size);
    MadView v;
    const MadDrop d = parse_mad(in, v);
    SNIC_FUZZ_REQUIRE(d < MadDrop::count_);
    if (d == MadDrop::ok) {
        SNIC_FUZZ_REQUIRE(size == kMadSize && v.data.size() == kMadDataSize);
        SNIC_FUZZ_REQUIRE(v.data.data() == data + kMadHeaderSize);
        Mad back{};
        write_mad_header(v.hdr, back);
        std::array<std::uint8_t, kMadHeaderSize> want{};
        std::memcpy(want.data(), data, kMadHeaderSize);
        want[18] = want[19] = 0;  // reserved
        back[18] = back[19] = 0;
        SNIC_FUZZ_REQUIRE(std::memcmp(back.data(), want.data(), kMadHeaderSize) == 0);
    }
    // Every codec on the data bytes, whatever the header says (the agent picks by attribute).
    if (size < kMadSize) return 0;
    const ConstMadData body(data + kMadHeaderSize, kMadDataSize);
    round_trip<ReqMsg>(body);
    round_trip<MraMsg>(body);
    round_trip<RejMsg>(body);
    round_trip<RepMsg>(body);
    round_trip<RtuMsg>(body);
    round_trip<DreqMsg>(body);
    round_trip<DrepMsg>(body);
    round_trip<LapMsg>(body);
    round_trip<AprMsg>(body);
    round_trip<SidrReqMsg>(body);
    round_trip<SidrRepMsg>(body);
    return 0;
}
