// libFuzzer target: proto/cm's connection agent (agent.cc, the state machine of IBA §12.9)
// fed arbitrary MADs, MADs that answer what it sent (its own comm IDs swapped in, the
// attribute and bytes chosen by the input), the consumer's calls and time. Asserts: every
// MAD it sends passes parse_mad and decodes as the message its attribute names; the drop
// reasons sum to mads_bad; the half-open count stays within max_half_open; every event
// names a connection, with at most 232 bytes of private data; a released connection gets no
// event (until its id is handed out again).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "proto/cm/agent.h"
#include "proto/cm/cma.h"
#include "proto/cm/mad.h"
#include "proto/cm/messages.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace snic::cm;
using snic::fuzz::Input;

constexpr std::uint32_t kLocal = 0xc0a80101, kPeer = 0xc0a80102;

template <typename M>
bool decodes(ConstMadData d) {
    return decode<M>(d).has_value();
}

bool decodes_as(std::uint16_t attr, ConstMadData d) {
    switch (static_cast<AttrId>(attr)) {
        case AttrId::req:
            return decodes<ReqMsg>(d);
        case AttrId::mra:
            return decodes<MraMsg>(d);
        case AttrId::rej:
            return decodes<RejMsg>(d);
        case AttrId::rep:
            return decodes<RepMsg>(d);
        case AttrId::rtu:
            return decodes<RtuMsg>(d);
        case AttrId::dreq:
            return decodes<DreqMsg>(d);
        case AttrId::drep:
            return decodes<DrepMsg>(d);
        case AttrId::sidr_req:
            return decodes<SidrReqMsg>(d);
        case AttrId::sidr_rep:
            return decodes<SidrRepMsg>(d);
        case AttrId::lap:
            return decodes<LapMsg>(d);
        case AttrId::apr:
            return decodes<AprMsg>(d);
        default:
            return false;
    }
}

struct CheckedSink final : Sink {
    void send_mad(std::uint32_t, std::uint32_t remote_qpn, std::uint32_t qkey,
                  std::span<const std::uint8_t> mad) override {
        SNIC_FUZZ_REQUIRE(remote_qpn == kGsiQpn && qkey == kGsiQkey);
        MadView v;
        SNIC_FUZZ_REQUIRE(parse_mad(mad, v) == MadDrop::ok);
        SNIC_FUZZ_REQUIRE(decodes_as(v.hdr.attr_id, ConstMadData(v.data.data(), kMadDataSize)));
        Mad m;
        std::memcpy(m.data(), mad.data(), kMadSize);
        sent.push_back(m);
        if (sent.size() > 64) sent.erase(sent.begin());
    }
    void deliver(const Event& e) override {
        SNIC_FUZZ_REQUIRE(e.id != 0);
        SNIC_FUZZ_REQUIRE(e.private_data.size() <= kMadDataSize);
        if (e.type == EventType::req_received || e.type == EventType::sidr_req_received)
            released.erase(e.id);
        SNIC_FUZZ_REQUIRE(released.count(e.id) == 0);
        ids.push_back(e.id);
        if (ids.size() > 32) ids.erase(ids.begin());
    }
    std::vector<Mad> sent;
    std::vector<ConnId> ids;
    std::set<ConnId> released;
};

constexpr std::array<AttrId, 11> kAttrs = {
    AttrId::req,  AttrId::mra, AttrId::rej, AttrId::rep,      AttrId::rtu,      AttrId::dreq,
    AttrId::drep, AttrId::lap, AttrId::apr, AttrId::sidr_req, AttrId::sidr_rep,
};

void check(const Agent& a, const AgentConfig& cfg) {
    const AgentCounters& c = a.counters();
    std::uint64_t drops = 0;
    for (std::uint64_t d : c.drops) drops += d;
    SNIC_FUZZ_REQUIRE(drops == c.mads_bad);
    SNIC_FUZZ_REQUIRE(a.half_open() <= cfg.max_half_open);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Input in(data, size);
    CheckedSink sink;
    AgentConfig cfg;
    cfg.local_ip = kLocal;
    cfg.max_half_open = 1 + in.u8() % 8;
    cfg.id_key[0] = in.u8();
    Agent agent(sink, cfg);
    std::uint64_t now = 1'000'000;
    std::array<std::uint8_t, 56> priv{};
    priv.fill(0xAB);

    auto pick_id = [&]() -> ConnId {
        const std::uint8_t b = in.u8();
        if (sink.ids.empty() || b >= 240) return b;
        return sink.ids[b % sink.ids.size()];
    };

    for (int step = 0; step < 128 && !in.empty(); ++step) {
        switch (in.u8() % 12) {
            case 0: {  // a raw MAD, its header made valid unless the input says not
                Mad mad{};
                const std::uint8_t how = in.u8();
                const auto raw = in.bytes(kMadSize);
                std::memcpy(mad.data(), raw.data(), raw.size());
                if ((how & 1) == 0) {
                    MadHeader h;
                    h.tid = in.u64();
                    h.attr_id = static_cast<std::uint16_t>(kAttrs[how / 2 % kAttrs.size()]);
                    write_mad_header(h, mad);
                }
                agent.receive(kPeer, kGsiQpn, mad, now);
                break;
            }
            case 1:
            case 2: {  // an answer to something it sent: comm IDs swapped, attribute chosen
                if (sink.sent.empty()) break;
                Mad mad = sink.sent[in.u8() % sink.sent.size()];
                std::uint8_t* d = mad.data() + kMadHeaderSize;
                std::array<std::uint8_t, 4> local, remote;
                std::memcpy(local.data(), d, 4);
                std::memcpy(remote.data(), d + 4, 4);
                std::memcpy(d + 4, local.data(), 4);
                const std::uint32_t fresh = in.u32();
                std::memcpy(d, &fresh, 4);
                const std::uint8_t how = in.u8();
                MadHeader h;
                h.tid = in.u64();
                h.attr_id = static_cast<std::uint16_t>(kAttrs[how % kAttrs.size()]);
                write_mad_header(h, mad);
                for (std::uint8_t n = in.u8() % 4; n > 0; --n) d[in.u8() % kMadDataSize] ^= in.u8();
                agent.receive(how & 0x80 ? in.u32() : kPeer, kGsiQpn, mad, now);
                break;
            }
            case 3: {
                ConnectParams p;
                p.remote_ip = kPeer;
                p.service_id = service_id(PortSpace::tcp, in.u16());
                p.qp.qpn = in.u32() & 0xffffff;
                p.qp.psn = in.u32() & 0xffffff;
                p.cm_response_timeout = in.u8() % 32;
                p.max_cm_retries = in.u8() % 16;
                p.private_data = std::span(priv).first(in.u8() % (priv.size() + 1));
                if (auto id = agent.connect(p, now)) sink.released.erase(*id);
                break;
            }
            case 4: {
                QpInfo qp;
                qp.qpn = in.u32() & 0xffffff;
                (void)agent.accept(pick_id(), qp, std::span(priv).first(in.u8() % 57), now);
                break;
            }
            case 5:
                (void)agent.confirm(pick_id(), {}, now);
                break;
            case 6:
                (void)agent.reject(pick_id(), in.u16(), {}, now);
                break;
            case 7:
                (void)agent.disconnect(pick_id(), {}, now);
                break;
            case 8:
                agent.established(pick_id(), now);
                break;
            case 9: {
                const ConnId id = pick_id();
                agent.release(id, now);
                if (id != 0) sink.released.insert(id);
                break;
            }
            case 10: {
                const std::uint8_t how = in.u8();
                if (how & 1) {
                    if (auto id = agent.sidr_request(kLocal, kPeer, in.u64(), {}, in.u8() % 32,
                                                     in.u8() % 16, now))
                        sink.released.erase(*id);
                } else {
                    (void)agent.sidr_reply(pick_id(), in.u8(), in.u32(), in.u32(), {}, now);
                }
                break;
            }
            case 11: {
                const std::uint64_t d = agent.next_deadline();
                now = (in.u8() & 1) && d != UINT64_MAX && d > now
                          ? d
                          : now + std::uint64_t{in.u32()} * 64;
                agent.poll(now);
                break;
            }
        }
        check(agent, cfg);
    }
    for (int i = 0; i < 64 && agent.next_deadline() != UINT64_MAX; ++i) {
        now = std::max(now, agent.next_deadline());
        agent.poll(now);
        check(agent, cfg);
    }
    return 0;
}
