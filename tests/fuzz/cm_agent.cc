// libFuzzer target: proto/cm's connection agent (agent.cc, the state machine of IBA §12.9)
// fed arbitrary MADs, MADs that answer what it sent (its own comm IDs swapped in, the
// attribute and bytes chosen by the input), the consumer's calls and time. Asserts: every
// MAD it sends passes parse_mad and decodes as the message its attribute names; the drop
// reasons sum to mads_bad; the half-open count stays within max_half_open; every event
// names a connection, with at most 232 bytes of private data; a released connection gets no
// event (until its id is handed out again). And the comm ID check: a DREQ or REJ that names a
// live connection by our ID but carries a wrong peer ID (random, 0, or one off the real one),
// or comes from another address, changes nothing (the connection's state is the same and no
// event is delivered); the DREQ that names both IDs right from the peer's address is taken
// (a connection that may be disconnected goes to TimeWait).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
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
        ++events;
        last = e.type;
        remote_ip[e.id] = e.remote_ip;
        ids.push_back(e.id);
        if (ids.size() > 32) ids.erase(ids.begin());
    }
    std::vector<Mad> sent;
    std::vector<ConnId> ids;
    std::set<ConnId> released;
    std::uint64_t events = 0;
    EventType last{};
    std::map<ConnId, std::uint32_t> remote_ip;  // the peer's address, as events name it
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

// A DREQ or a REJ naming our connection `id` and the peer's `their_id` (its TID, and a REJ's
// message and reason, from the input).
Mad dreq_or_rej(Input& in, bool dreq, ConnId id, std::uint32_t their_id, std::uint32_t our_qpn,
                std::span<const std::uint8_t> priv) {
    if (dreq) {
        DreqMsg m;
        m.local_comm_id = their_id;
        m.remote_comm_id = id;
        m.remote_qpn = our_qpn & 0xffffff;
        set_private(m.private_data, priv);
        return build_mad(in.u64(), m);
    }
    RejMsg m;
    m.local_comm_id = their_id;
    m.remote_comm_id = id;
    m.message_rejected = in.u8() % 3;
    m.reason = in.u8() % 34;
    set_private(m.private_data, priv);
    return build_mad(in.u64(), m);
}

// States in which a DREQ that names the connection rightly moves it to TimeWait.
bool takes_dreq(State s) {
    return s == State::established || s == State::rep_sent || s == State::mra_rep_rcvd ||
           s == State::dreq_sent;
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
    // Our QPN on each connection (connect's, accept's): a DREQ must name it.
    std::map<ConnId, std::uint32_t> our_qpn;

    for (int step = 0; step < 128 && !in.empty(); ++step) {
        switch (in.u8() % 14) {
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
                if (auto id = agent.connect(p, now)) {
                    sink.released.erase(*id);
                    our_qpn[*id] = p.qp.qpn;
                }
                break;
            }
            case 4: {
                QpInfo qp;
                qp.qpn = in.u32() & 0xffffff;
                const ConnId id = pick_id();
                if (agent.accept(id, qp, std::span(priv).first(in.u8() % 57), now))
                    our_qpn[id] = qp.qpn;
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
            case 12: {  // a spoofed DREQ or REJ: our ID right, the peer's wrong or its address
                if (sink.ids.empty()) break;
                const ConnId id = sink.ids[in.u8() % sink.ids.size()];
                const State before = agent.state_of(id);
                if (before == State::idle) break;
                const std::uint8_t how = in.u8();
                const bool dreq = how & 1;
                // What the agent matches the peer's ID against: 0 while it knows none (a
                // DREQ naming 0 then names it rightly; a REJ, the peer's answer to our REQ,
                // matches any).
                const std::optional<std::uint32_t> real = agent.peer_comm_id(id);
                const std::uint32_t known = real.value_or(0);
                std::uint32_t their = 0;
                switch (how >> 1 & 3) {
                    case 0:
                        their = in.u32();
                        break;
                    case 1:
                        their = 0;
                        break;
                    case 2:
                        their = known + 1;
                        break;
                    case 3:
                        their = known - 1;
                        break;
                }
                std::uint32_t src = sink.remote_ip[id];
                const bool right_id = dreq ? their == known : !real || their == *real;
                if ((how & 8) || right_id) src ^= 1u + in.u8();  // another address
                const std::uint32_t qpn = our_qpn.contains(id) ? our_qpn[id] : in.u32();
                const Mad mad = dreq_or_rej(in, dreq, id, their, qpn,
                                            std::span(priv).first(in.u8() % (priv.size() + 1)));
                const std::uint64_t events = sink.events;
                agent.receive(src, kGsiQpn, mad, now);
                SNIC_FUZZ_REQUIRE(agent.state_of(id) == before);
                SNIC_FUZZ_REQUIRE(sink.events == events);
                break;
            }
            case 13: {  // the peer's own DREQ: both IDs right, from its address, to our QPN
                if (sink.ids.empty()) break;
                const ConnId id = sink.ids[in.u8() % sink.ids.size()];
                const State before = agent.state_of(id);
                const std::optional<std::uint32_t> their = agent.peer_comm_id(id);
                if (before == State::idle || !their || !our_qpn.contains(id)) break;
                const Mad mad = dreq_or_rej(in, true, id, *their, our_qpn[id],
                                            std::span(priv).first(in.u8() % (priv.size() + 1)));
                agent.receive(sink.remote_ip[id], kGsiQpn, mad, now);
                const State after = agent.state_of(id);
                if (takes_dreq(before)) {
                    SNIC_FUZZ_REQUIRE(after == State::timewait);
                    // The consumer hears of it, unless it released the connection.
                    if (!sink.released.contains(id) && before == State::established)
                        SNIC_FUZZ_REQUIRE(sink.last == EventType::dreq_received &&
                                          sink.ids.back() == id);
                } else {
                    SNIC_FUZZ_REQUIRE(after == before);
                }
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
