// Two RC QPs back to back over FakeLink (every packet goes through parse()): random traffic
// in both directions (SEND 0..64 KiB, WRITE with and without immediate, READ, atomics,
// inline data, random SGE splits, unsignaled WRs, fences) over a link that loses,
// duplicates, reorders and corrupts packets, checking every byte delivered and every
// completion exactly once, in order, and every atomic executed exactly once; PSN wrap;
// a dead peer; RNR; remote access errors end to end.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

constexpr std::uint64_t kArena = 1'310'720;  // bytes per region: a round of 16 ops of 64 KiB
constexpr std::uint32_t kMaxOpsPerRound = 16;

// memcpy/memcmp that accept empty ranges (whose data() may be null).
void copy_bytes(void* dst, const void* src, std::size_t n) {
    if (n != 0) std::memcpy(dst, src, n);
}
bool same_bytes(const void* a, const void* b, std::size_t n) {
    return n == 0 || std::memcmp(a, b, n) == 0;
}

// Writes `data` through the SGE list as the engines scatter it, into `out` (by region).
bool scattered_equals(FakeMemory& mem, const Sge* sge, std::uint32_t n,
                      std::span<const std::uint8_t> data) {
    std::size_t at = 0;
    for (std::uint32_t i = 0; i < n && at < data.size(); ++i) {
        const auto& r = mem.region(sge[i].lkey);
        const std::size_t len = std::min<std::size_t>(sge[i].length, data.size() - at);
        if (!same_bytes(r.base + (sge[i].addr - r.va), data.data() + at, len)) return false;
        at += len;
    }
    return at == data.size();
}

// Random traffic from one node (the requester) to the other (the responder), in rounds:
// a round posts up to 16 WRs (and the receive WRs they need), runs until its last WR and
// its receives complete, then checks everything.
class Traffic {
  public:
    // `small`: the share of SENDs and WRITEs of at most `small_max` bytes in one SGE (or
    // inline), the common case the engines take in one piece.
    Traffic(Node& req, Node& resp, std::uint64_t seed, std::uint32_t max_inline, double small = 0,
            std::uint32_t small_max = 0)
        : req_(req),
          resp_(resp),
          rng_(seed),
          max_inline_(max_inline),
          small_(small),
          small_max_(small_max) {
        src_ = req.mem.add(kArena);
        src2_ = req.mem.add(kArena);
        rdst_ = req.mem.add(kArena);
        adst_ = req.mem.add(4096);
        rbuf_ = resp.mem.add(kArena);
        wtarget_ = resp.mem.add(kArena);
        rsrc_ = resp.mem.add(kArena);
        atom_ = resp.mem.add(64);
    }

    // Posts the next round of `n` WRs.
    void begin_round(std::uint32_t n) {
        ops_.clear();
        want_scq_.clear();
        want_rcq_.clear();
        scq_base_ = req_.q.scq.size();
        rcq_base_ = resp_.q.rcq.size();
        off_src_ = off_src2_ = off_rdst_ = off_rbuf_ = off_wt_ = off_rsrc_ = off_adst_ = 0;
        for (std::uint32_t i = 0; i < n; ++i) post_one(i + 1 == n);
    }

    bool round_done() const {
        return req_.q.scq.size() >= scq_base_ + want_scq_.size() &&
               resp_.q.rcq.size() >= rcq_base_ + want_rcq_.size();
    }
    bool failed() const {
        for (std::size_t i = scq_base_; i < req_.q.scq.size(); ++i)
            if (req_.q.scq[i].status != WcStatus::success) return true;
        for (std::size_t i = rcq_base_; i < resp_.q.rcq.size(); ++i)
            if (resp_.q.rcq[i].status != WcStatus::success) return true;
        return false;
    }

    // Checks the round: completions exactly as expected, in order, and every byte.
    void check_round() {
        ASSERT_EQ(req_.q.scq.size(), scq_base_ + want_scq_.size());
        ASSERT_EQ(resp_.q.rcq.size(), rcq_base_ + want_rcq_.size());
        for (std::size_t i = 0; i < want_scq_.size(); ++i) {
            const Completion& got = req_.q.scq[scq_base_ + i];
            const Op& op = ops_[want_scq_[i]];
            ASSERT_EQ(got.wr_id, op.wr.wr_id) << "send completion " << i;
            ASSERT_EQ(got.status, WcStatus::success);
            ASSERT_EQ(got.opcode, wr_op_info(op.wr.op).wc);
            ASSERT_EQ(got.byte_len, op.length);
        }
        for (std::size_t i = 0; i < want_rcq_.size(); ++i) {
            const Completion& got = resp_.q.rcq[rcq_base_ + i];
            const Op& op = ops_[want_rcq_[i]];
            ASSERT_EQ(got.wr_id, op.recv.wr_id) << "receive completion " << i;
            ASSERT_EQ(got.status, WcStatus::success);
            ASSERT_EQ(got.byte_len, op.length);
            const bool imm = op.wr.op == WrOp::send_imm || op.wr.op == WrOp::rdma_write_imm;
            ASSERT_EQ(got.with_imm, imm);
            if (imm) {
                ASSERT_EQ(got.imm_or_rkey, op.wr.imm_or_rkey);
            }
            ASSERT_EQ(got.opcode, op.wr.op == WrOp::rdma_write_imm ? WcOpcode::recv_rdma_with_imm
                                                                   : WcOpcode::recv);
        }
        for (const Op& op : ops_) {
            switch (wr_op_info(op.wr.op).kind) {
                case WrKind::send:
                    ASSERT_TRUE(
                        scattered_equals(resp_.mem, op.recv.sge.data(), op.recv.num_sge, op.data))
                        << "SEND " << op.wr.wr_id << " of " << op.length << " bytes";
                    break;
                case WrKind::write:
                    ASSERT_TRUE(same_bytes(resp_.mem.host(wtarget_, op.remote_off), op.data.data(),
                                           op.length))
                        << "WRITE " << op.wr.wr_id;
                    break;
                case WrKind::read:
                    ASSERT_TRUE(
                        scattered_equals(req_.mem, op.wr.sge.data(), op.wr.num_sge, op.data))
                        << "READ " << op.wr.wr_id << " of " << op.length << " bytes";
                    break;
                case WrKind::atomic: {
                    std::uint8_t got[8];
                    std::size_t at = 0;
                    for (std::uint32_t s = 0; s < op.wr.num_sge; ++s) {
                        std::memcpy(got + at,
                                    req_.mem.host(adst_, op.wr.sge[s].addr - req_.mem.va(adst_)),
                                    op.wr.sge[s].length);
                        at += op.wr.sge[s].length;
                    }
                    std::uint64_t orig = 0;
                    std::memcpy(&orig, got, 8);
                    ASSERT_EQ(orig, op.expect_orig) << "atomic " << op.wr.wr_id;
                    break;
                }
                case WrKind::local:
                    break;
            }
        }
    }

    void check_atomics() const {
        std::uint64_t counter = 0, word = 0;
        std::memcpy(&counter, resp_.mem.host(atom_, 0), 8);
        std::memcpy(&word, resp_.mem.host(atom_, 8), 8);
        EXPECT_EQ(counter, fetch_adds_);  // each fetch-add executed exactly once
        EXPECT_EQ(word, cs_value_);
    }

    std::uint64_t ops_posted = 0, bytes_posted = 0;

  private:
    struct Op {
        SendWr wr;
        RecvWr recv;
        std::uint32_t length = 0;
        std::uint64_t remote_off = 0;
        std::vector<std::uint8_t> data;
        std::uint64_t expect_orig = 0;
    };

    std::uint64_t rnd(std::uint64_t lo, std::uint64_t hi) {  // [lo, hi]
        return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
    }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
    void fill(std::span<std::uint8_t> b) {
        std::size_t i = 0;
        for (; i + 8 <= b.size(); i += 8) {
            const std::uint64_t v = rng_();
            std::memcpy(b.data() + i, &v, 8);
        }
        for (; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(rng_());
    }
    std::uint32_t random_size() {
        const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
        if (r < 0.25) return static_cast<std::uint32_t>(rnd(0, 300));
        if (r < 0.55) return static_cast<std::uint32_t>(rnd(301, 8192));
        return static_cast<std::uint32_t>(rnd(8193, 65536));
    }

    // Splits [off, off + len) of a region into 1..4 SGEs, with gaps between them and now
    // and then a zero-length SGE.
    std::uint32_t split(std::array<Sge, kMaxSge>& sge, std::uint32_t key, FakeMemory& mem,
                        std::uint64_t& off, std::uint32_t len) {
        const std::uint32_t pieces = static_cast<std::uint32_t>(rnd(1, 4));
        std::uint32_t n = 0;
        std::uint32_t left = len;
        for (std::uint32_t p = 0; p < pieces; ++p) {
            const std::uint32_t take =
                p + 1 == pieces ? left : static_cast<std::uint32_t>(rnd(0, left));
            if (take == 0 && !chance(0.3) && p + 1 != pieces) continue;
            sge[n++] = {mem.va(key, off), take, key};
            off += take + rnd(0, 16);
            left -= take;
        }
        off = (off + 8) & ~std::uint64_t{7};
        return n;
    }

    void post_one(bool last) {
        Op op;
        SendWr& wr = op.wr;
        wr.wr_id = next_wr_id_++;
        const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
        wr.op = r < 0.25   ? WrOp::send
                : r < 0.35 ? WrOp::send_imm
                : r < 0.45 ? WrOp::rdma_write
                : r < 0.60 ? WrOp::rdma_write_imm
                : r < 0.80 ? WrOp::rdma_read
                : r < 0.92 ? WrOp::atomic_fetch_add
                           : WrOp::atomic_cmp_swp;
        wr.signaled = last || chance(0.8);
        wr.fence = chance(0.05);
        wr.solicited = chance(0.2);
        wr.imm_or_rkey = static_cast<std::uint32_t>(rng_());
        const WrKind kind = wr_op_info(wr.op).kind;

        if (kind == WrKind::atomic) {
            op.length = 8;
            wr.rkey = atom_;
            // The result lands in 8 bytes, sometimes split over two SGEs.
            const std::uint64_t at = off_adst_;
            off_adst_ += 16;
            if (chance(0.3)) {
                wr.num_sge = 2;
                wr.sge[0] = {req_.mem.va(adst_, at), 3, adst_};
                wr.sge[1] = {req_.mem.va(adst_, at + 3), 5, adst_};
            } else {
                wr.num_sge = 1;
                wr.sge[0] = {req_.mem.va(adst_, at), 8, adst_};
            }
            if (wr.op == WrOp::atomic_fetch_add) {
                wr.remote_addr = resp_.mem.va(atom_, 0);
                wr.compare_add = 1;
                op.expect_orig = fetch_adds_++;
            } else {
                wr.remote_addr = resp_.mem.va(atom_, 8);
                wr.compare_add = chance(0.7) ? cs_value_ : cs_value_ + 1;
                wr.swap = rng_();
                op.expect_orig = cs_value_;
                if (wr.compare_add == cs_value_) cs_value_ = wr.swap;
            }
        } else {
            const bool small = kind != WrKind::read && small_ > 0 && chance(small_);
            op.length = small ? static_cast<std::uint32_t>(rnd(0, small_max_)) : random_size();
            op.data.resize(op.length);
            if (kind == WrKind::read) {
                op.remote_off = off_rsrc_;
                off_rsrc_ = (off_rsrc_ + op.length + 15) & ~std::uint64_t{7};
                fill(resp_.mem.bytes(rsrc_, op.remote_off, op.length));
                copy_bytes(op.data.data(), resp_.mem.host(rsrc_, op.remote_off), op.length);
                wr.remote_addr = resp_.mem.va(rsrc_, op.remote_off);
                wr.rkey = rsrc_;
                wr.num_sge = split(wr.sge, rdst_, req_.mem, off_rdst_, op.length);
            } else {
                fill(op.data);
                if (op.length <= max_inline_ && chance(0.4)) {
                    wr.inline_data = true;
                    wr.inline_len = op.length;
                    copy_bytes(wr.inline_bytes.data(), op.data.data(), op.length);
                } else if (small) {
                    wr.num_sge = op.length != 0 || chance(0.5) ? 1 : 0;
                    if (wr.num_sge == 1) {
                        wr.sge[0] = {req_.mem.va(src_, off_src_), op.length, src_};
                        copy_bytes(req_.mem.host(src_, off_src_), op.data.data(), op.length);
                        off_src_ = (off_src_ + op.length + 8) & ~std::uint64_t{7};
                    }
                } else {
                    // Gathered from two regions now and then.
                    const bool two = chance(0.3);
                    const std::uint32_t first =
                        two ? static_cast<std::uint32_t>(rnd(0, op.length)) : op.length;
                    std::array<Sge, kMaxSge> a{}, b{};
                    const std::uint64_t at1 = off_src_;
                    const std::uint32_t na = split(a, src_, req_.mem, off_src_, first);
                    const std::uint64_t at2 = off_src2_;
                    const std::uint32_t nb =
                        two ? split(b, src2_, req_.mem, off_src2_, op.length - first) : 0;
                    (void)at1;
                    (void)at2;
                    wr.num_sge = na + nb;
                    for (std::uint32_t i = 0; i < na; ++i) wr.sge[i] = a[i];
                    for (std::uint32_t i = 0; i < nb; ++i) wr.sge[na + i] = b[i];
                    // Write the payload through the SGEs.
                    std::size_t at = 0;
                    for (std::uint32_t i = 0; i < wr.num_sge; ++i) {
                        FakeMemory::Region& reg = req_.mem.region(wr.sge[i].lkey);
                        copy_bytes(reg.base + (wr.sge[i].addr - reg.va), op.data.data() + at,
                                   wr.sge[i].length);
                        at += wr.sge[i].length;
                    }
                }
                if (kind == WrKind::write) {
                    op.remote_off = off_wt_;
                    off_wt_ = (off_wt_ + op.length + 15) & ~std::uint64_t{7};
                    wr.remote_addr = resp_.mem.va(wtarget_, op.remote_off);
                    wr.rkey = wtarget_;
                }
            }
        }
        // The receive WR a SEND or a WRITE with immediate consumes.
        if (kind == WrKind::send || wr.op == WrOp::rdma_write_imm) {
            op.recv.wr_id = 1'000'000 + wr.wr_id;
            if (kind == WrKind::send) {
                const auto cap = static_cast<std::uint32_t>(op.length + rnd(0, 64));
                op.recv.num_sge = split(op.recv.sge, rbuf_, resp_.mem, off_rbuf_, cap);
            }
            resp_.q.rq.push_back(op.recv);
            want_rcq_.push_back(ops_.size());
        }
        if (wr.signaled) want_scq_.push_back(ops_.size());
        req_.q.sq.push_back(wr);
        ++ops_posted;
        bytes_posted += op.length;
        ops_.push_back(std::move(op));
    }

    Node& req_;
    Node& resp_;
    std::mt19937_64 rng_;
    std::uint32_t max_inline_;
    double small_;
    std::uint32_t small_max_;
    std::uint32_t src_, src2_, rdst_, adst_, rbuf_, wtarget_, rsrc_, atom_;
    std::uint64_t off_src_ = 0, off_src2_ = 0, off_rdst_ = 0, off_rbuf_ = 0, off_wt_ = 0;
    std::uint64_t off_rsrc_ = 0, off_adst_ = 0;
    std::vector<Op> ops_;
    std::vector<std::size_t> want_scq_, want_rcq_;
    std::size_t scq_base_ = 0, rcq_base_ = 0;
    std::uint64_t next_wr_id_ = 1;
    std::uint64_t fetch_adds_ = 0, cs_value_ = 0;
};

struct StressResult {
    std::uint64_t ops = 0, bytes = 0;
};

// Runs `ops_per_direction` random WRs each way; both QPs must end healthy and idle. `small`:
// the share of small SENDs and WRITEs (Traffic).
void run_traffic(RcPair& pair, std::uint32_t ops_per_direction, std::uint64_t seed,
                 StressResult* result = nullptr, double small = 0) {
    const std::uint32_t small_max = pair.a.qp->config().mtu;
    Traffic ab(pair.a, pair.b, seed * 2 + 1, pair.a.qp->config().max_inline, small, small_max);
    Traffic ba(pair.b, pair.a, seed * 2 + 2, pair.b.qp->config().max_inline, small, small_max);
    std::mt19937_64 rng(seed);
    std::uint32_t left_ab = ops_per_direction, left_ba = ops_per_direction;
    const auto next = [&](std::uint32_t& left) {
        const std::uint32_t n = std::min<std::uint32_t>(
            left, std::uniform_int_distribution<std::uint32_t>(1, kMaxOpsPerRound)(rng));
        left -= n;
        return n;
    };
    ab.begin_round(next(left_ab));
    ba.begin_round(next(left_ba));
    bool ab_live = true, ba_live = true;
    while (ab_live || ba_live) {
        const bool ok = pair.run_until([&] {
            return ab.failed() || ba.failed() || (ab_live && ab.round_done()) ||
                   (ba_live && ba.round_done());
        });
        ASSERT_TRUE(ok) << "stuck at t=" << pair.now << " ns, step " << pair.steps;
        ASSERT_FALSE(ab.failed());
        ASSERT_FALSE(ba.failed());
        if (ab_live && ab.round_done()) {
            ab.check_round();
            if (::testing::Test::HasFatalFailure()) return;
            if (left_ab == 0)
                ab_live = false;
            else
                ab.begin_round(next(left_ab));
        }
        if (ba_live && ba.round_done()) {
            ba.check_round();
            if (::testing::Test::HasFatalFailure()) return;
            if (left_ba == 0)
                ba_live = false;
            else
                ba.begin_round(next(left_ba));
        }
    }
    // Let everything settle: nothing more may complete (exactly once), both stay healthy.
    const std::size_t sa = pair.a.q.scq.size(), sb = pair.b.q.scq.size();
    const std::size_t ra = pair.a.q.rcq.size(), rb = pair.b.q.rcq.size();
    pair.run_until([] { return false; }, 200'000);
    EXPECT_EQ(pair.a.q.scq.size(), sa);
    EXPECT_EQ(pair.b.q.scq.size(), sb);
    EXPECT_EQ(pair.a.q.rcq.size(), ra);
    EXPECT_EQ(pair.b.q.rcq.size(), rb);
    EXPECT_EQ(pair.a.qp->state(), RcState::ok);
    EXPECT_EQ(pair.b.qp->state(), RcState::ok);
    EXPECT_EQ(pair.a.qp->send_wrs_held(), 0u);
    EXPECT_EQ(pair.b.qp->send_wrs_held(), 0u);
    EXPECT_LE(pair.link.parse_errors, pair.link.corrupted);  // only a flipped bit breaks one
    const std::uint64_t bad_icrc =
        pair.a.qp->counters().drop_bad_icrc.get() + pair.b.qp->counters().drop_bad_icrc.get();
    EXPECT_LE(bad_icrc, pair.link.corrupted);
    if (pair.link.corrupted > 20) {
        EXPECT_GT(bad_icrc, 0u);  // the engines caught some
    }
    ab.check_atomics();
    ba.check_atomics();
    if (result != nullptr) {
        result->ops = ab.ops_posted + ba.ops_posted;
        result->bytes = ab.bytes_posted + ba.bytes_posted;
    }
}

void record(const RcPair& pair, const StressResult& r) {
    const auto& a = pair.a.qp->counters();
    const auto& b = pair.b.qp->counters();
    const auto sum = [&](RcCounter RcCounters::*f) { return (a.*f).get() + (b.*f).get(); };
    ::testing::Test::RecordProperty("ops", std::to_string(r.ops));
    ::testing::Test::RecordProperty("bytes", std::to_string(r.bytes));
    ::testing::Test::RecordProperty("packets_offered", std::to_string(pair.link.offered));
    ::testing::Test::RecordProperty("retransmits",
                                    std::to_string(sum(&RcCounters::tx_retransmits)));
    ::testing::Test::RecordProperty("timeouts", std::to_string(sum(&RcCounters::timeouts)));
    ::testing::Test::RecordProperty("seq_naks", std::to_string(sum(&RcCounters::seq_naks_sent)));
    ::testing::Test::RecordProperty("duplicates",
                                    std::to_string(sum(&RcCounters::duplicate_requests)));
    ::testing::Test::RecordProperty("read_replays", std::to_string(sum(&RcCounters::read_replays)));
    ::testing::Test::RecordProperty("atomic_replays",
                                    std::to_string(sum(&RcCounters::atomic_replays)));
}

// `all_pending`: every packet handed over with its ICRC left to the engine (FakeLink), not
// only those the transport leaves to it.
void stress(std::uint32_t mtu, std::uint32_t ops_per_direction, std::uint64_t seed,
            bool all_pending = false) {
    RcPair pair = RcPair::standard(mtu, seed);
    pair.link.faults = {.loss = 0.05, .duplicate = 0.01, .reorder = 0.01, .corrupt = 0.005};
    pair.link.all_pending = all_pending;
    StressResult r;
    run_traffic(pair, ops_per_direction, seed, &r);
    record(pair, r);
    // The faults happened, and the engines had to work for it.
    EXPECT_GT(pair.link.lost, 0u);
    EXPECT_GT(pair.link.duplicated, 0u);
    EXPECT_GT(pair.link.reordered, 0u);
    EXPECT_GT(pair.link.corrupted, 0u);
    const auto& a = pair.a.qp->counters();
    const auto& b = pair.b.qp->counters();
    EXPECT_GT(a.tx_retransmits.get() + b.tx_retransmits.get(), 0u);
    EXPECT_GT(a.duplicate_requests.get() + b.duplicate_requests.get(), 0u);
    EXPECT_GT(a.seq_naks_sent.get() + b.seq_naks_sent.get(), 0u);
    EXPECT_GT(pair.idle_polls, 0u);  // RcPair::step held idle QPs' polls to doing nothing
}

// Every payload of registered memory held by the wire for a while after it went out (a port
// that frees its mbufs late): every WR still completes exactly once, in order, and the holds
// did delay some.
TEST(RcStress, payloads_held_by_the_wire_after_they_went_out_lose_nothing) {
    RcPair pair = RcPair::standard(1024, 41);
    pair.link.faults = {.loss = 0.05, .duplicate = 0.01, .reorder = 0.01, .corrupt = 0.005};
    pair.a.wire.place();
    pair.b.wire.place();
    pair.placed_release_div = 3;
    run_traffic(pair, 1500, 41);
    EXPECT_GT(pair.a.wire.placed_count + pair.b.wire.placed_count, 0u);
    EXPECT_GT(pair.a.wire.settled_count + pair.b.wire.settled_count, 0u);
    EXPECT_GT(pair.a.qp->counters().tx_held_waits.get() + pair.b.qp->counters().tx_held_waits.get(),
              0u);
}

TEST(RcLink, send_write_read_and_atomics_end_to_end_on_a_clean_link) {
    RcPair pair = RcPair::standard(1024, 3);
    run_traffic(pair, 300, 3);
    EXPECT_EQ(pair.a.qp->counters().tx_retransmits.get(), 0u);
    EXPECT_EQ(pair.b.qp->counters().tx_retransmits.get(), 0u);
    EXPECT_EQ(pair.a.qp->counters().timeouts.get(), 0u);
}

TEST(RcStress, random_traffic_over_a_lossy_link_mtu_1024) {
    stress(1024, 2500, 11);
}

TEST(RcStress, random_traffic_over_a_lossy_link_mtu_256) {
    stress(256, 1500, 12, true);
}

TEST(RcStress, random_traffic_over_a_lossy_link_mtu_4096) {
    stress(4096, 2500, 13);
}

// The engines' one-piece common case (a one-packet SEND or WRITE, RcConfig::fast_path)
// against the general engine alone: the same seeded traffic, mostly small messages but with
// everything else mixed in, over the same faulty link, must put the same bytes on the wire in
// the same order, and complete the same WRs in the same order with the same completions.
void differential(std::uint32_t mtu, std::uint64_t seed, bool lazy, bool all_pending = false) {
    struct Run {
        std::vector<std::vector<std::uint8_t>> wire_a, wire_b;
        std::vector<Completion> scq_a, scq_b, rcq_a, rcq_b;
        std::uint64_t local_calls = 0;
        std::vector<std::uint64_t> counters;  // both QPs', every field
    };
    const auto run = [&](bool fast) {
        RcConfig ca = pair_config(0x11, 0x22, 100, 5000, mtu);
        RcConfig cb = pair_config(0x22, 0x11, 5000, 100, mtu);
        ca.fast_path = cb.fast_path = fast;
        RcPair pair(ca, cb, seed);
        pair.lazy = lazy;
        pair.link.all_pending = all_pending;
        pair.a.wire.keep = pair.b.wire.keep = true;
        pair.link.faults = {.loss = 0.03, .duplicate = 0.01, .reorder = 0.01, .corrupt = 0.005};
        run_traffic(pair, 600, seed, nullptr, 0.7);
        Run r;
        r.wire_a = pair.a.wire.log;
        r.wire_b = pair.b.wire.log;
        r.scq_a = pair.a.q.scq;
        r.scq_b = pair.b.q.scq;
        r.rcq_a = pair.a.q.rcq;
        r.rcq_b = pair.b.q.rcq;
        r.local_calls = pair.a.mem.local_calls + pair.b.mem.local_calls;
        for (const RcQp* qp : {pair.a.qp.get(), pair.b.qp.get()})
            for (const RcCounterField& f : kRcCounterFields)
                r.counters.push_back((qp->counters().*f.field).get());
        EXPECT_GT(pair.link.lost, 0u);
        EXPECT_GT(pair.link.corrupted, 0u);
        return r;
    };
    const Run general = run(false);
    if (::testing::Test::HasFatalFailure()) return;
    const Run fast = run(true);
    if (::testing::Test::HasFatalFailure()) return;
    // The one-piece path ran: it looks an SGE up once, the general path twice.
    EXPECT_LT(fast.local_calls, general.local_calls);
    const auto same_wire = [](const auto& x, const auto& y, const char* who) {
        ASSERT_EQ(x.size(), y.size()) << who << ": packets sent";
        for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << who << ": packet " << i;
    };
    same_wire(general.wire_a, fast.wire_a, "a");
    same_wire(general.wire_b, fast.wire_b, "b");
    const auto same_cq = [](const auto& x, const auto& y, const char* which) {
        ASSERT_EQ(x.size(), y.size()) << which;
        for (std::size_t i = 0; i < x.size(); ++i) {
            ASSERT_EQ(x[i].wr_id, y[i].wr_id) << which << " " << i;
            ASSERT_EQ(x[i].status, y[i].status) << which << " " << i;
            ASSERT_EQ(x[i].opcode, y[i].opcode) << which << " " << i;
            ASSERT_EQ(x[i].byte_len, y[i].byte_len) << which << " " << i;
            ASSERT_EQ(x[i].imm_or_rkey, y[i].imm_or_rkey) << which << " " << i;
            ASSERT_EQ(x[i].with_imm, y[i].with_imm) << which << " " << i;
            ASSERT_EQ(x[i].solicited, y[i].solicited) << which << " " << i;
            ASSERT_EQ(x[i].qp_num, y[i].qp_num) << which << " " << i;
            ASSERT_EQ(x[i].src_qp, y[i].src_qp) << which << " " << i;
        }
    };
    same_cq(general.scq_a, fast.scq_a, "send CQ a");
    same_cq(general.scq_b, fast.scq_b, "send CQ b");
    same_cq(general.rcq_a, fast.rcq_a, "receive CQ a");
    same_cq(general.rcq_b, fast.rcq_b, "receive CQ b");
    ASSERT_EQ(general.counters.size(), fast.counters.size());
    for (std::size_t i = 0; i < general.counters.size(); ++i)
        EXPECT_EQ(general.counters[i], fast.counters[i])
            << kRcCounterFields[i % kRcCounterFields.size()].name;
}

TEST(RcFast, one_piece_path_and_general_engine_agree_byte_for_byte_over_a_faulty_link_mtu_1024) {
    differential(1024, 31, false);
}

TEST(RcFast, one_piece_path_and_general_engine_agree_byte_for_byte_over_a_faulty_link_mtu_256) {
    differential(256, 32, false);
}

TEST(RcFast, one_piece_path_and_general_engine_agree_with_every_icrc_left_to_the_engines) {
    differential(1024, 34, false, true);
}

TEST(RcFast, one_piece_path_and_general_engine_agree_when_engines_run_only_for_work) {
    differential(4096, 33, true);
}

// The daemon runs an engine only when it has work: a packet for it, a post, its deadline
// (daemon/lcore/qp_sched.h). Driven that way, random traffic over a lossy link completes exactly as
// when every engine is polled on every step; and once the traffic is over, neither engine is
// polled at all.
TEST(RcStress, engines_run_only_for_packets_posts_and_deadlines_lose_nothing) {
    RcPair pair = RcPair::standard(1024, 14);
    pair.lazy = true;
    pair.link.faults = {.loss = 0.05, .duplicate = 0.01, .reorder = 0.01, .corrupt = 0.005};
    run_traffic(pair, 1500, 14);
    EXPECT_GT(pair.link.lost, 0u);
    EXPECT_GT(pair.a.qp->counters().timeouts.get() + pair.b.qp->counters().timeouts.get(), 0u);
    EXPECT_LT(pair.polls, 2 * pair.steps);  // some steps polled neither or one
    const std::uint64_t polls = pair.polls;
    for (int i = 0; i < 10'000; ++i) pair.step();
    EXPECT_EQ(pair.polls, polls);
    EXPECT_EQ(pair.a.qp->next_deadline(), kRcNever);
    EXPECT_EQ(pair.b.qp->next_deadline(), kRcNever);
}

TEST(RcLink, psn_wraps_at_2_24_under_loss) {
    RcPair pair(pair_config(0x11, 0x22, 0xffffff - 40, 0xfffff0, 1024),
                pair_config(0x22, 0x11, 0xfffff0, 0xffffff - 40, 1024), 21);
    pair.link.faults = {.loss = 0.03, .duplicate = 0.01, .reorder = 0.01, .corrupt = 0.0};
    run_traffic(pair, 200, 21);
    // Both directions went round the PSN circle.
    EXPECT_LT(pair.a.qp->next_psn(), 0x100000u);
    EXPECT_LT(pair.b.qp->next_psn(), 0x100000u);
    EXPECT_EQ(pair.b.qp->expected_psn(), pair.a.qp->next_psn());
}

// Posts n SENDs of `len` bytes from `from`.
std::uint32_t post_sends(Node& from, std::uint32_t n, std::uint32_t len) {
    const std::uint32_t key = from.mem.add(std::uint64_t{n} * len + 64);
    fill_pattern(from.mem.bytes(key, 0, std::uint64_t{n} * len), n);
    for (std::uint32_t i = 0; i < n; ++i)
        from.q.sq.push_back(
            send_wr(i + 1, WrOp::send, key, from.mem.va(key, std::uint64_t{i} * len), len));
    return key;
}

TEST(RcLink, dead_peer_every_wr_completes_after_retry_cnt_plus_1_timeouts_then_flush) {
    RcPair pair = RcPair::standard(1024, 4);
    pair.link.faults.loss = 1.0;
    post_sends(pair.a, 5, 3000);
    const RcTime t0 = pair.now;
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 5; }));
    const RcConfig& cfg = pair.a.qp->config();
    EXPECT_EQ(pair.a.qp->counters().timeouts.get(), cfg.retry_cnt + 1u);
    EXPECT_GE(pair.now - t0, (cfg.retry_cnt + 1u) * ack_timeout_ns(cfg.timeout));
    EXPECT_LT(pair.now - t0, (cfg.retry_cnt + 2u) * ack_timeout_ns(cfg.timeout));
    // The oldest WR carries the error (IBA §10.7.3.1, as verbs reports it); every later one
    // is flushed, in order.
    const auto& scq = pair.a.q.scq;
    EXPECT_EQ(scq[0].wr_id, 1u);
    EXPECT_EQ(scq[0].status, WcStatus::retry_exc_err);
    for (std::size_t i = 1; i < 5; ++i) {
        EXPECT_EQ(scq[i].wr_id, i + 1);
        EXPECT_EQ(scq[i].status, WcStatus::wr_flush_err);
    }
    EXPECT_EQ(pair.a.qp->state(), RcState::error);
    EXPECT_EQ(pair.a.qp->error(), RcError::retry_exceeded);
    // Every packet sent went out (retry_cnt + 1) times.
    EXPECT_EQ(pair.a.qp->counters().tx_send_packets.get(), 5u * 3u * (cfg.retry_cnt + 1u));
    // Posts after the error are flushed.
    post_sends(pair.a, 2, 10);
    pair.run_until([&] { return pair.a.q.scq.size() == 7; });
    ASSERT_EQ(scq.size(), 7u);
    EXPECT_EQ(scq[5].status, WcStatus::wr_flush_err);
    EXPECT_EQ(scq[6].status, WcStatus::wr_flush_err);
    EXPECT_TRUE(pair.b.q.rcq.empty());
}

TEST(RcLink, rnr_naks_until_a_receive_wr_is_posted_then_delivered_once) {
    RcPair pair = RcPair::standard(1024, 5);
    const std::uint32_t key = post_sends(pair.a, 3, 2500);
    // No receive WR at b for a while.
    const RcTime until = pair.now + 2'000'000;
    pair.run_until([&] { return pair.now >= until; });
    EXPECT_GE(pair.a.qp->counters().rnr_naks_received.get(), 5u);
    EXPECT_EQ(pair.b.qp->counters().rnr_naks_sent.get(),
              pair.a.qp->counters().rnr_naks_received.get());
    EXPECT_TRUE(pair.a.q.scq.empty());
    EXPECT_EQ(pair.a.qp->state(), RcState::ok);
    const std::uint32_t rkey = pair.b.mem.add(3 * 2500);
    for (std::uint32_t i = 0; i < 3; ++i)
        pair.b.q.rq.push_back(recv_wr(100 + i, rkey, pair.b.mem.va(rkey, i * 2500), 2500));
    ASSERT_TRUE(
        pair.run_until([&] { return pair.a.q.scq.size() == 3 && pair.b.q.rcq.size() == 3; }));
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(pair.a.q.scq[i].status, WcStatus::success);
        EXPECT_EQ(pair.b.q.rcq[i].wr_id, 100 + i);
        EXPECT_EQ(pair.b.q.rcq[i].byte_len, 2500u);
    }
    EXPECT_EQ(std::memcmp(pair.b.mem.host(rkey), pair.a.mem.host(key), 3 * 2500), 0);
    pair.run_until([] { return false; }, 10'000);
    EXPECT_EQ(pair.b.q.rcq.size(), 3u);
}

TEST(RcLink, rnr_retry_exhausted_fails_the_send_with_rnr_retry_exc_err) {
    RcConfig ca = pair_config(0x11, 0x22, 100, 5000);
    ca.rnr_retry = 3;
    RcPair pair(ca, pair_config(0x22, 0x11, 5000, 100), 6);
    post_sends(pair.a, 2, 100);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 2; }));
    EXPECT_EQ(pair.a.q.scq[0].status, WcStatus::rnr_retry_exc_err);
    EXPECT_EQ(pair.a.q.scq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(pair.a.qp->counters().rnr_naks_received.get(), 4u);
    EXPECT_EQ(pair.a.qp->error(), RcError::rnr_retry_exceeded);
    EXPECT_EQ(pair.b.qp->state(), RcState::ok);  // an RNR is no error of the responder
}

// A WRITE the responder must refuse: NAK remote access error, nothing written, the
// requester's WR completes with REM_ACCESS_ERR, both QPs go to error and flush.
void expect_remote_access_error(RcPair& pair, std::uint32_t rkey, std::uint64_t remote_addr,
                                std::uint32_t target) {
    const std::uint32_t src = pair.a.mem.add(8192);
    fill_pattern(pair.a.mem.bytes(src, 0, 8192), 77);
    const std::vector<std::uint8_t> before(pair.b.mem.host(target), pair.b.mem.host(target) + 8192);
    SendWr wr = send_wr(1, WrOp::rdma_write, src, pair.a.mem.va(src), 5000);
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    pair.a.q.sq.push_back(wr);
    pair.a.q.sq.push_back(send_wr(2, WrOp::send, src, pair.a.mem.va(src), 10));
    pair.b.q.rq.push_back(recv_wr(9, target, pair.b.mem.va(target), 64));
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 2; }));
    EXPECT_EQ(pair.a.q.scq[0].status, WcStatus::rem_access_err);
    EXPECT_EQ(pair.a.q.scq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(pair.a.qp->error(), RcError::remote_nak);
    EXPECT_EQ(pair.b.qp->error(), RcError::responder_error);
    EXPECT_EQ(std::memcmp(pair.b.mem.host(target), before.data(), 8192), 0);
    ASSERT_EQ(pair.b.q.rcq.size(), 1u);
    EXPECT_EQ(pair.b.q.rcq[0].status, WcStatus::wr_flush_err);
}

TEST(RcLink, write_with_a_bad_rkey_is_refused_end_to_end) {
    RcPair pair = RcPair::standard(1024, 7);
    const std::uint32_t target = pair.b.mem.add(8192);
    expect_remote_access_error(pair, 0x777777, pair.b.mem.va(target), target);
}

TEST(RcLink, write_out_of_the_region_bounds_is_refused_end_to_end) {
    RcPair pair = RcPair::standard(1024, 8);
    const std::uint32_t target = pair.b.mem.add(8192);
    expect_remote_access_error(pair, target, pair.b.mem.va(target, 4000), target);
}

TEST(RcLink, write_without_remote_write_access_is_refused_end_to_end) {
    RcPair pair = RcPair::standard(1024, 9);
    const std::uint32_t target =
        pair.b.mem.add(8192, rc_access::local_write | rc_access::remote_read);
    expect_remote_access_error(pair, target, pair.b.mem.va(target), target);
}

TEST(RcLink, write_to_another_pd_is_refused_end_to_end) {
    RcPair pair = RcPair::standard(1024, 10);
    const std::uint32_t target = pair.b.mem.add(8192, kAllAccess, 2);
    expect_remote_access_error(pair, target, pair.b.mem.va(target), target);
}

TEST(RcLink, read_of_a_bad_rkey_completes_with_rem_access_err) {
    RcPair pair = RcPair::standard(1024, 12);
    const std::uint32_t dst = pair.a.mem.add(4096);
    SendWr wr = send_wr(1, WrOp::rdma_read, dst, pair.a.mem.va(dst), 4096);
    wr.remote_addr = 0x1000;
    wr.rkey = 0x4321;
    pair.a.q.sq.push_back(wr);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 1; }));
    EXPECT_EQ(pair.a.q.scq[0].status, WcStatus::rem_access_err);
    EXPECT_EQ(pair.a.q.scq[0].opcode, WcOpcode::rdma_read);
}

// perftest sets max_rd_atomic to the peer's max_qp_rd_atom, which the Linux soft-RoCE driver
// reports as 128: that many READs may be outstanding at once, and each is answered.
TEST(RcLink, one_hundred_twenty_eight_reads_outstanding_are_all_answered) {
    RcConfig ca = pair_config(0x11, 0x22, 100, 5000);
    RcConfig cb = pair_config(0x22, 0x11, 5000, 100);
    ca.max_rd_atomic = cb.max_dest_rd_atomic = kRcMaxRdAtomic;
    ca.sq_depth = 256;
    ASSERT_EQ(rc_config_error(ca), nullptr);
    ASSERT_EQ(rc_config_error(cb), nullptr);
    RcPair pair(ca, cb);
    constexpr std::uint32_t kReads = kRcMaxRdAtomic;
    const std::uint32_t src = pair.b.mem.add(kReads * 64);
    const std::uint32_t dst = pair.a.mem.add(kReads * 64);
    auto& from = pair.b.mem.region(src);
    for (std::uint32_t i = 0; i < kReads * 64; ++i) from.base[i] = static_cast<std::uint8_t>(i * 7);
    for (std::uint32_t i = 0; i < kReads; ++i) {
        SendWr wr = send_wr(i, WrOp::rdma_read, dst, pair.a.mem.va(dst) + i * 64, 64);
        wr.remote_addr = pair.b.mem.va(src) + i * 64;
        wr.rkey = src;
        pair.a.q.sq.push_back(wr);
    }
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == kReads; }));
    for (std::uint32_t i = 0; i < kReads; ++i) {
        EXPECT_EQ(pair.a.q.scq[i].status, WcStatus::success);
        EXPECT_EQ(pair.a.q.scq[i].wr_id, i);
    }
    const auto& to = pair.a.mem.region(dst);
    EXPECT_EQ(std::memcmp(to.base, from.base, kReads * 64), 0);
    EXPECT_EQ(pair.b.qp->counters().tx_read_responses.get(), kReads);
}

}  // namespace
}  // namespace snic::roce::test
