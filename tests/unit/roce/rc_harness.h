// Fakes for the RC engines' unit tests: registered memory with keys, PDs and access flags
// (FakeMemory), work and completion queues (FakeQueues), a transmit path that records what
// a QP sends (FakeWire), a link between two QPs that parses every packet with parse() and
// can drop, duplicate, reorder and corrupt with a seeded generator (FakeLink), a pair of
// nodes on a link driven by a fake clock (RcPair), and packet/WR builders.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "proto/roce/packet.h"
#include "proto/roce/psn.h"
#include "proto/roce/rc.h"
#include "proto/roce/rc_qp.h"

namespace snic::roce::test {

inline constexpr std::uint32_t kAllRemote =
    rc_access::remote_read | rc_access::remote_write | rc_access::remote_atomic;
inline constexpr std::uint32_t kAllAccess = rc_access::local_write | kAllRemote;

// --- memory --------------------------------------------------------------------------------

// One node's registered memory. Regions (MRs) and windows (MWs bound into an MR) have one
// key for both lkey and rkey; the QP using the memory belongs to PD `pd`.
class FakeMemory final : public QpMemory {
  public:
    struct Region {
        std::uint32_t key = 0;
        std::uint32_t pd = 0;
        std::uint32_t access = 0;
        std::uint64_t va = 0;
        std::uint64_t len = 0;
        std::uint8_t* base = nullptr;  // host address of va
        bool valid = true;
        bool remote_invalidate = true;  // Send with Invalidate may invalidate it
        bool window = false;
    };

    explicit FakeMemory(std::uint32_t pd = 1) : pd_(pd) {}

    // Registers `len` bytes (zeroed, 8-byte aligned) and returns the key. pd 0: the QP's.
    std::uint32_t add(std::uint64_t len, std::uint32_t access = kAllAccess, std::uint32_t pd = 0) {
        auto store = std::make_unique<std::vector<std::uint64_t>>((len + 7) / 8 + 1);
        Region r;
        r.key = next_key_;
        next_key_ += 0x100;
        r.pd = pd == 0 ? pd_ : pd;
        r.access = access;
        r.va = next_va_;
        next_va_ += (len + 0xffff) & ~std::uint64_t{0xfff};
        r.len = len;
        r.base = reinterpret_cast<std::uint8_t*>(store->data());
        stores_.push_back(std::move(store));
        regions_.push_back(r);
        return r.key;
    }

    Region* find(std::uint32_t key) {
        for (Region& r : regions_)
            if (r.key == key) return &r;
        return nullptr;
    }
    Region& region(std::uint32_t key) { return *find(key); }
    std::uint64_t va(std::uint32_t key, std::uint64_t off = 0) { return region(key).va + off; }
    std::uint8_t* host(std::uint32_t key, std::uint64_t off = 0) { return region(key).base + off; }
    std::span<std::uint8_t> bytes(std::uint32_t key, std::uint64_t off, std::uint64_t len) {
        return {host(key, off), static_cast<std::size_t>(len)};
    }

    // QpMemory
    std::uint8_t* local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                        bool write) override {
        ++local_calls;
        Region* r = find(lkey);
        if (r == nullptr || !r->valid || r->pd != pd_) return nullptr;
        if (write && (r->access & rc_access::local_write) == 0) return nullptr;
        if (addr < r->va || addr + len > r->va + r->len || addr + len < addr) return nullptr;
        return r->base + (addr - r->va);
    }
    RemoteRegion remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                        RemoteNeed need) override {
        ++remote_calls;
        Region* r = find(rkey);
        if (r == nullptr || !r->valid) return {nullptr, RemoteCheck::bad_key};
        if (r->pd != pd_) return {nullptr, RemoteCheck::pd_mismatch};
        const std::uint32_t want = need == RemoteNeed::read    ? rc_access::remote_read
                                   : need == RemoteNeed::write ? rc_access::remote_write
                                                               : rc_access::remote_atomic;
        if ((r->access & want) == 0) return {nullptr, RemoteCheck::no_access};
        if (addr < r->va || addr + len > r->va + r->len || addr + len < addr)
            return {nullptr, RemoteCheck::out_of_bounds};
        return {r->base + (addr - r->va), RemoteCheck::ok};
    }
    bool invalidate(std::uint32_t rkey) override {
        Region* r = find(rkey);
        if (r == nullptr || !r->valid || r->pd != pd_ || !r->remote_invalidate) return false;
        r->valid = false;
        invalidated.push_back(rkey);
        return true;
    }
    WcStatus local_invalidate(std::uint32_t key) override {
        Region* r = find(key);
        if (r == nullptr || r->pd != pd_) return WcStatus::loc_prot_err;
        r->valid = false;
        invalidated.push_back(key);
        return WcStatus::success;
    }
    WcStatus bind_mw(const MwBind& b) override {
        Region* mr = find(b.mr_lkey);
        if (mr == nullptr || !mr->valid || mr->pd != pd_ || mr->window)
            return WcStatus::mw_bind_err;
        if (b.addr < mr->va || b.addr + b.length > mr->va + mr->len) return WcStatus::mw_bind_err;
        Region* w = find(b.new_rkey);
        if (w == nullptr) {
            regions_.push_back(Region{});
            w = &regions_.back();
        }
        w->key = b.new_rkey;
        w->pd = pd_;
        w->access = b.access;
        w->va = b.addr;
        w->len = b.length;
        w->base = mr->base + (b.addr - mr->va);
        w->valid = true;
        w->window = true;
        return WcStatus::success;
    }

    std::uint64_t local_calls = 0, remote_calls = 0;
    std::vector<std::uint32_t> invalidated;

  private:
    std::uint32_t pd_;
    std::uint32_t next_key_ = 0x1000;
    std::uint64_t next_va_ = 0x7f0000010000ull;
    std::deque<Region> regions_;  // stable addresses
    std::vector<std::unique_ptr<std::vector<std::uint64_t>>> stores_;
};

// --- queues ----------------------------------------------------------------------------------

class FakeQueues final : public QpQueues {
  public:
    bool send_ready() override { return !sq.empty(); }
    bool pop_send(SendWr& out) override {
        if (sq.empty()) return false;
        out = sq.front();
        sq.pop_front();
        return true;
    }
    bool pop_recv(RecvWr& out) override {
        if (rq.empty()) return false;
        out = rq.front();
        rq.pop_front();
        return true;
    }
    void complete_send(const Completion& c) override { scq.push_back(c); }
    void complete_recv(const Completion& c) override { rcq.push_back(c); }

    std::deque<SendWr> sq;
    std::deque<RecvWr> rq;
    std::vector<Completion> scq, rcq;
};

// --- the wire --------------------------------------------------------------------------------

// Records every packet a QP sends (with 4 zero bytes where the glue would put the ICRC,
// so that parse() takes it as it is). `refuse` makes tx_alloc fail that many times;
// `capacity` bounds the packets waiting in `out` (the link drains it).
class FakeWire final : public RcWire {
  public:
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        ++allocs;
        if (refuse > 0) {
            --refuse;
            return {};
        }
        if (out.size() >= capacity || len > buf_.size()) return {};
        allocated_ = len;
        return {buf_.data(), len};
    }
    void tx_send(std::size_t len, std::size_t hdr, std::span<const TxPiece> payload) override {
        EXPECT_TRUE(gather_payload({buf_.data(), len}, hdr, payload));
        std::vector<std::uint8_t> frame(buf_.begin(), buf_.begin() + static_cast<long>(len));
        frame.resize(len + kIcrcLen, 0);
        ++sent_count;
        if (keep) log.push_back(frame);
        out.push_back(std::move(frame));
        allocated_ = 0;
    }

    // A wire that sends payloads from where they lie (place()): the packet goes out as a copy
    // would, but the payload stays held under its WR's hold until release_placed() lets it go,
    // as a port frees its mbufs when it likes. Until place(): a wire that copies.
    void place() {
        placed = true;
        tx_placed_from = 1;
    }
    void tx_send_placed(std::size_t len, std::size_t hdr, TxPiece payload, TxHold* hold) override {
        if (placed && hold != nullptr) {
            if (*hold == 0) *hold = next_hold_++;
            ++in_flight_[*hold];
            pending_.push_back(*hold);
            ++placed_count;
        } else if (hold == nullptr) {
            ++unheld_count;
        }
        tx_send(len, hdr, {&payload, 1});
    }
    bool tx_settled(TxHold& hold) override {
        EXPECT_NE(hold, 0u);
        const auto it = in_flight_.find(hold);
        if (it != in_flight_.end() && it->second > 0) return false;
        in_flight_.erase(hold);
        hold = 0;
        ++settled_count;
        return true;
    }
    void tx_forget(TxHold& hold) override {
        forgotten.push_back(hold);
        hold = 0;
    }
    // Lets the oldest n held payloads go.
    void release_placed(std::size_t n = SIZE_MAX) {
        for (; n > 0 && !pending_.empty(); --n) {
            --in_flight_[pending_.front()];
            pending_.pop_front();
        }
    }
    std::size_t placed_held() const { return pending_.size(); }

    // The i-th packet sent, parsed (log must be kept).
    Packet sent(std::size_t i) const { return parse(log.at(i)); }
    std::size_t logged() const { return log.size(); }

    std::deque<std::vector<std::uint8_t>> out;  // sent, not yet taken by a link or a test
    std::vector<std::vector<std::uint8_t>> log;
    bool keep = true;
    std::size_t capacity = 1u << 20;
    std::uint32_t refuse = 0;
    std::uint64_t allocs = 0, sent_count = 0;
    bool placed = false;
    std::uint64_t placed_count = 0, settled_count = 0, unheld_count = 0;
    std::vector<TxHold> forgotten;

  private:
    std::map<TxHold, std::uint32_t> in_flight_;
    std::deque<TxHold> pending_;
    TxHold next_hold_ = 1;
    std::array<std::uint8_t, 4096 + 256> buf_{};
    std::size_t allocated_ = 0;
};

// --- packets and WRs built by tests -------------------------------------------------------------

// A packet a test sends to a QP: built with build(), handed over parsed.
struct TestPacket {
    std::vector<std::uint8_t> bytes;
    Packet parsed() const { return parse(bytes); }
};

// The ICRC a test's packet stands for here: the CRC-32 of its bytes before the ICRC (the
// pseudo-header's masking is the transport's, tested in test_icrc.cc), stored in its ICRC.
inline void seal(std::vector<std::uint8_t>& bytes) {
    icrc_store(bytes.data() + bytes.size() - kIcrcLen,
               ~crc32_update(kCrc32Init, {bytes.data(), bytes.size() - kIcrcLen}));
}

// `bytes` (sealed, then perhaps corrupted) parsed as the transport hands over a packet whose
// ICRC it leaves to the payload's copy: the register over every byte before the payload.
inline Packet parsed_pending(const std::vector<std::uint8_t>& bytes) {
    Packet p = parse(bytes);
    if (!p.ok()) return p;
    p.icrc_pending = true;
    p.icrc_reg = crc32_update(kCrc32Init, {bytes.data(), p.payload.data()});
    return p;
}

inline TestPacket make_packet(const PacketSpec& spec) {
    TestPacket t;
    t.bytes.resize(transport_length(spec.opcode, spec.payload.size()));
    const std::size_t n = build(t.bytes, spec);
    t.bytes.resize(n);
    return t;
}

inline PacketSpec spec_for(Opcode op, std::uint32_t dest_qp, std::uint32_t psn) {
    PacketSpec s;
    s.opcode = op;
    s.dest_qp = dest_qp;
    s.psn = psn & kPsnMask;
    return s;
}

inline TestPacket ack_packet(std::uint32_t dest_qp, std::uint32_t psn, std::uint32_t msn = 0) {
    PacketSpec s = spec_for(Opcode::rc_acknowledge, dest_qp, psn);
    s.aeth.syndrome = aeth_syndrome(AckType::ack, kCreditsInvalid);
    s.aeth.msn = msn;
    return make_packet(s);
}

inline TestPacket nak_packet(std::uint32_t dest_qp, std::uint32_t psn, NakCode code) {
    PacketSpec s = spec_for(Opcode::rc_acknowledge, dest_qp, psn);
    s.aeth.syndrome = nak_syndrome(code);
    return make_packet(s);
}

inline TestPacket rnr_nak_packet(std::uint32_t dest_qp, std::uint32_t psn, std::uint8_t timer) {
    PacketSpec s = spec_for(Opcode::rc_acknowledge, dest_qp, psn);
    s.aeth.syndrome = aeth_syndrome(AckType::rnr_nak, timer);
    return make_packet(s);
}

inline TestPacket read_response(std::uint32_t dest_qp, Opcode op, std::uint32_t psn,
                                std::span<const std::uint8_t> payload) {
    PacketSpec s = spec_for(op, dest_qp, psn);
    s.aeth.syndrome = aeth_syndrome(AckType::ack, kCreditsInvalid);
    s.payload = payload;
    return make_packet(s);
}

inline TestPacket atomic_ack_packet(std::uint32_t dest_qp, std::uint32_t psn, std::uint64_t orig) {
    PacketSpec s = spec_for(Opcode::rc_atomic_acknowledge, dest_qp, psn);
    s.aeth.syndrome = aeth_syndrome(AckType::ack, kCreditsInvalid);
    s.atomic_ack_eth.orig = orig;
    return make_packet(s);
}

inline SendWr send_wr(std::uint64_t wr_id, WrOp op, std::uint32_t lkey, std::uint64_t addr,
                      std::uint32_t len, bool signaled = true) {
    SendWr wr;
    wr.wr_id = wr_id;
    wr.op = op;
    wr.signaled = signaled;
    if (len != 0 || op == WrOp::atomic_cmp_swp || op == WrOp::atomic_fetch_add) {
        wr.num_sge = 1;
        wr.sge[0] = {addr, len, lkey};
    }
    return wr;
}

inline RecvWr recv_wr(std::uint64_t wr_id, std::uint32_t lkey, std::uint64_t addr,
                      std::uint32_t len) {
    RecvWr wr;
    wr.wr_id = wr_id;
    wr.num_sge = 1;
    wr.sge[0] = {addr, len, lkey};
    return wr;
}

inline void fill_pattern(std::span<std::uint8_t> b, std::uint32_t seed) {
    std::uint32_t x = seed * 2654435761u + 1;
    for (auto& c : b) {
        x = x * 1103515245u + 12345u;
        c = static_cast<std::uint8_t>(x >> 16);
    }
}

// --- the link ------------------------------------------------------------------------------

struct LinkFaults {
    double loss = 0, duplicate = 0, reorder = 0, corrupt = 0;
};

// Carries packets between two QPs: each step takes what their wires sent, applies faults
// (a reordered packet is held back one step, so packets sent after it overtake it; a
// corrupted one is dropped, as the receiver's ICRC check would), parses what arrives with
// parse() and hands it to the destination QP.
class FakeLink {
  public:
    FakeLink(std::uint64_t seed) : rng_(seed) {}

    void attach(RcQp& a, FakeWire& wa, RcQp& b, FakeWire& wb) {
        dir_[0] = {&wa, &b, {}, {}};
        dir_[1] = {&wb, &a, {}, {}};
    }

    // Moves and delivers; returns the number of packets delivered.
    std::size_t step(RcTime now) {
        std::size_t delivered = 0;
        for (Dir& d : dir_) {
            // What was held back last step goes now, after this step's packets.
            std::deque<std::vector<std::uint8_t>> now_q;
            while (!d.wire->out.empty()) {
                std::vector<std::uint8_t> f = std::move(d.wire->out.front());
                d.wire->out.pop_front();
                ++offered;
                if (roll(faults.loss)) {
                    ++lost;
                    continue;
                }
                // As the transport hands packets over: those of icrc_with_copy() with their
                // ICRC left to the engine, which must drop one with a bit flipped anywhere,
                // whatever it says; the others checked here first, and dropped when wrong.
                seal(f);
                if (roll(faults.corrupt)) {
                    ++corrupted;
                    const std::size_t bit =
                        std::uniform_int_distribution<std::size_t>(0, f.size() * 8 - 1)(rng_);
                    f[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
                }
                if (roll(faults.duplicate)) {
                    ++duplicated;
                    now_q.push_back(f);
                }
                if (roll(faults.reorder)) {
                    ++reordered;
                    d.next_held.push_back(std::move(f));
                    continue;
                }
                now_q.push_back(std::move(f));
            }
            for (auto& f : d.held) now_q.push_back(std::move(f));
            d.held = std::move(d.next_held);
            d.next_held.clear();
            for (const auto& f : now_q) {
                Packet p = parsed_pending(f);
                if (!p.ok()) {
                    ++parse_errors;
                    continue;
                }
                if (!all_pending && !icrc_with_copy(p)) {
                    if (!icrc_settle(p)) {
                        ++icrc_dropped;
                        continue;
                    }
                    p.icrc_pending = false;
                }
                ++delivered;
                d.dst->on_packet(p, now);
            }
        }
        return delivered;
    }

    bool idle() const {
        for (const Dir& d : dir_)
            if (!d.wire->out.empty() || !d.held.empty() || !d.next_held.empty()) return false;
        return true;
    }

    LinkFaults faults;
    bool all_pending = false;  // every packet with its ICRC left to the engine
    std::uint64_t offered = 0, lost = 0, duplicated = 0, reordered = 0, corrupted = 0;
    std::uint64_t parse_errors = 0;
    std::uint64_t icrc_dropped = 0;  // checked here, as the transport does, and wrong

  private:
    struct Dir {
        FakeWire* wire = nullptr;
        RcQp* dst = nullptr;
        std::vector<std::vector<std::uint8_t>> held, next_held;
    };
    bool roll(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

    std::mt19937_64 rng_;
    Dir dir_[2];
};

// --- one QP and a test playing its peer ------------------------------------------------------

inline RcConfig solo_config(std::uint32_t mtu = 256) {
    RcConfig c;
    c.qpn = 0x11;
    c.dest_qpn = 0x22;
    c.mtu = mtu;
    c.sq_psn = 100;
    c.rq_psn = 5000;
    c.timeout = 10;  // 4.19 ms
    c.retry_cnt = 7;
    c.rnr_retry = 7;
    c.min_rnr_timer = 1;
    c.max_rd_atomic = 4;
    c.max_dest_rd_atomic = 4;
    c.remote_access = kAllRemote;
    c.sq_depth = 16;
    return c;
}

// One QP whose peer is the test: it delivers packets it built and takes what the QP sent.
struct Solo {
    explicit Solo(const RcConfig& c = solo_config(), std::uint32_t pd = 1)
        : mem(pd), qp(c, mem, q, wire) {
        wire.keep = false;
    }
    Solo(const Solo&) = delete;
    Solo& operator=(const Solo&) = delete;

    bool poll() { return qp.poll(now); }
    void deliver(const TestPacket& p) { qp.on_packet(p.parsed(), now); }
    // Delivers with the ICRC left to the engine, after `corrupt` flipped what it likes.
    void deliver_pending(TestPacket p, void (*corrupt)(std::vector<std::uint8_t>&) = nullptr) {
        seal(p.bytes);
        if (corrupt != nullptr) corrupt(p.bytes);
        qp.on_packet(parsed_pending(p.bytes), now);
    }
    // Polls until the QP has nothing more to do now.
    void settle() {
        for (int i = 0; i < 1000 && qp.poll(now); ++i) {
        }
    }
    // The packets sent since the last take(), parsed (their bytes are kept alive here).
    std::vector<Packet> take() {
        std::vector<Packet> out;
        while (!wire.out.empty()) {
            taken_.push_back(std::move(wire.out.front()));
            wire.out.pop_front();
            out.push_back(parse(taken_.back()));
        }
        return out;
    }
    // settle() then take().
    std::vector<Packet> run() {
        settle();
        return take();
    }

    FakeMemory mem;
    FakeQueues q;
    FakeWire wire;
    RcQp qp;
    RcTime now = 1'000'000;

  private:
    std::deque<std::vector<std::uint8_t>> taken_;
};

inline Opcode op_of(const Packet& p) {
    return static_cast<Opcode>(p.opcode());
}
inline std::uint32_t psn_of(const Packet& p) {
    return p.bth().psn.host();
}

// --- two nodes on a link ----------------------------------------------------------------------

struct Node {
    explicit Node(std::uint32_t pd = 1) : mem(pd) {}
    FakeMemory mem;
    FakeQueues q;
    FakeWire wire;
    std::unique_ptr<RcQp> qp;

    // What the daemon's scheduler knows of the QP (daemon/lcore/qp_sched.h): it runs the engine
    // when a packet arrived for it, when its client posted send WRs since the engine last looked (a
    // doorbell), or when next_deadline() is due.
    bool has_work(RcTime now) const {
        return q.sq.size() > sq_after_poll || packets_in() != packets_seen ||
               qp->next_deadline() <= now;
    }
    void polled() {
        sq_after_poll = q.sq.size();
        packets_seen = packets_in();
    }
    // Every packet handed to the QP counts in one of these.
    std::uint64_t packets_in() const {
        const RcCounters& c = qp->counters();
        std::uint64_t n = 0;
        for (RcCounter RcCounters::*f :
             {&RcCounters::rx_send_packets, &RcCounters::rx_write_packets,
              &RcCounters::rx_read_requests, &RcCounters::rx_atomic_requests,
              &RcCounters::rx_read_responses, &RcCounters::rx_atomic_acks, &RcCounters::rx_acks,
              &RcCounters::rx_naks, &RcCounters::drop_qp_error, &RcCounters::drop_bad_pkey,
              &RcCounters::drop_bad_qpn, &RcCounters::drop_bad_opcode})
            n += (c.*f).get();
        return n;
    }
    std::size_t sq_after_poll = 0;
    std::uint64_t packets_seen = 0;
};

inline RcConfig pair_config(std::uint32_t qpn, std::uint32_t dest, std::uint32_t sq_psn,
                            std::uint32_t rq_psn, std::uint32_t mtu = 1024) {
    RcConfig c;
    c.qpn = qpn;
    c.dest_qpn = dest;
    c.mtu = mtu;
    c.sq_psn = sq_psn;
    c.rq_psn = rq_psn;
    c.timeout = 8;  // 1.05 ms
    c.retry_cnt = 7;
    c.rnr_retry = 7;
    c.min_rnr_timer = 1;  // 10 us
    c.max_rd_atomic = 8;
    c.max_dest_rd_atomic = 8;
    c.remote_access = kAllRemote;
    c.sq_depth = 64;
    return c;
}

// Two QPs back to back on a FakeLink, driven by a fake clock: each step polls both QPs,
// moves packets and advances the clock by step_ns; when nothing moved and nothing is in
// flight, the clock jumps to the earlier QP deadline.
struct RcPair {
    RcPair(const RcConfig& ca, const RcConfig& cb, std::uint64_t seed = 1) : link(seed) {
        a.wire.keep = false;
        b.wire.keep = false;
        a.qp = std::make_unique<RcQp>(ca, a.mem, a.q, a.wire);
        b.qp = std::make_unique<RcQp>(cb, b.mem, b.q, b.wire);
        link.attach(*a.qp, a.wire, *b.qp, b.wire);
    }
    RcPair(const RcPair&) = delete;
    RcPair& operator=(const RcPair&) = delete;
    static RcPair standard(std::uint32_t mtu = 1024, std::uint64_t seed = 1,
                           std::uint32_t psn_a = 100, std::uint32_t psn_b = 5000) {
        return RcPair(pair_config(0x11, 0x22, psn_a, psn_b, mtu),
                      pair_config(0x22, 0x11, psn_b, psn_a, mtu), seed);
    }

    // One step; false when nothing at all happened. Lazy: a QP is polled only when it has work
    // (Node::has_work), as the daemon runs it.
    bool step() {
        bool did = false;
        for (Node* n : {&a, &b}) {
            if (placed_release_div != 0) {
                const std::size_t held = n->wire.placed_held();
                n->wire.release_placed((held + placed_release_div - 1) / placed_release_div);
            }
            if (lazy && !n->has_work(now)) continue;
            ++polls;
            // RcQp::idle() promises a poll that does nothing when no send WR waits.
            const bool idle = n->qp->idle(now) && n->q.sq.empty();
            const bool polled = n->qp->poll(now);
            if (idle) {
                ++idle_polls;
                EXPECT_FALSE(polled) << "an idle QP's poll did something at t=" << now;
            }
            did |= polled;
            n->polled();
        }
        did |= link.step(now) > 0;
        ++steps;
        if (did || !link.idle()) {
            now += step_ns;
            return true;
        }
        const RcTime t = std::min(a.qp->next_deadline(), b.qp->next_deadline());
        if (t == kRcNever) return false;
        now = std::max(now + step_ns, t);
        return true;
    }

    // Steps until done() or nothing can happen any more or max_steps. Returns done().
    template <typename Done>
    bool run_until(Done done, std::uint64_t max_steps = 2'000'000) {
        for (std::uint64_t i = 0; i < max_steps; ++i) {
            if (done()) return true;
            if (!step()) return done();
        }
        return done();
    }

    Node a{1}, b{1};
    FakeLink link;
    RcTime now = 1'000'000;
    RcTime step_ns = 1'000;
    std::uint64_t steps = 0;
    bool lazy = false;
    // Placing wires (FakeWire::placed): each step, a node's wire lets go of this share (1/div,
    // rounded up) of the payloads it holds; 0: of none (the test lets them go).
    std::size_t placed_release_div = 0;
    std::uint64_t polls = 0;
    std::uint64_t idle_polls = 0;  // polls made while the QP was idle (and did nothing)
};

}  // namespace snic::roce::test
