// Fakes for the iWARP QP engine's tests: the registered memory and the work/completion
// queues are rc_harness.h's (transport-neutral: verbs::QpMemory and verbs::QpQueues); added
// here are a byte stream that records what a QP sends (FakeStream: may refuse, checks every
// FPDU against the MSS), and a pair of QPs joined by a seeded link that cuts the byte stream
// at random points, holds bytes back and can corrupt one byte (IwPair).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "proto/iwarp/qp.h"
#include "tests/unit/roce/rc_harness.h"

namespace snic::iwarp::test {

using roce::test::FakeMemory;
using roce::test::FakeQueues;
using roce::test::fill_pattern;
using roce::test::kAllAccess;
using roce::test::kAllRemote;
using verbs::Completion;
using verbs::RecvWr;
using verbs::SendWr;
using verbs::WcStatus;
using verbs::WrOp;

class FakeStream final : public IwStream {
  public:
    bool send(std::span<const std::uint8_t> fpdu) override {
        ++calls;
        if (refuse > 0) {
            --refuse;
            return false;
        }
        if (fpdus >= accept_limit) return false;
        if (fpdu.size() > mss) ++oversize;
        bytes.insert(bytes.end(), fpdu.begin(), fpdu.end());
        ++fpdus;
        return true;
    }
    std::deque<std::uint8_t> bytes;                  // sent, not yet taken by the link
    std::uint32_t refuse = 0;                        // refuse the next this many
    std::uint64_t accept_limit = ~std::uint64_t{0};  // refuse once this many were taken
    std::uint32_t mss = 1u << 20;                    // what the test expects the QP to respect
    std::uint64_t calls = 0, fpdus = 0, oversize = 0;
};

inline IwConfig iw_config(std::uint32_t qpn, std::uint32_t mss = 1448) {
    IwConfig c;
    c.qpn = qpn;
    c.mss = mss;
    c.crc = true;
    c.ird = 8;
    c.ord = 8;
    c.remote_access = kAllRemote;
    c.sq_depth = 64;
    return c;
}

struct IwNode {
    FakeMemory mem{1};
    FakeQueues q;
    FakeStream stream;
    std::unique_ptr<IwQp> qp;
};

// Two QPs joined by a byte link. Each step polls both QPs and moves bytes: in random chunks
// (cut at random points), at most `max_step_bytes` a step (the rest is held back).
struct IwPair {
    IwPair(const IwConfig& ca, const IwConfig& cb, std::uint64_t seed = 1) : rng(seed) {
        a.qp = std::make_unique<IwQp>(ca, a.mem, a.q, a.stream);
        b.qp = std::make_unique<IwQp>(cb, b.mem, b.q, b.stream);
        a.stream.mss = ca.mss;
        b.stream.mss = cb.mss;
    }
    static std::unique_ptr<IwPair> standard(std::uint32_t mss = 1448, std::uint64_t seed = 1) {
        return std::make_unique<IwPair>(iw_config(0x11, mss), iw_config(0x22, mss), seed);
    }

    // Moves up to max_step_bytes from `from` to `to`, in random pieces.
    bool move(IwNode& from, IwNode& to) {
        if (from.stream.bytes.empty()) return false;
        std::size_t budget = std::min<std::size_t>(from.stream.bytes.size(), max_step_bytes);
        while (budget > 0) {
            std::size_t n = std::uniform_int_distribution<std::size_t>(1, max_cut)(rng);
            n = std::min(n, budget);
            std::vector<std::uint8_t> chunk(from.stream.bytes.begin(),
                                            from.stream.bytes.begin() + static_cast<long>(n));
            from.stream.bytes.erase(from.stream.bytes.begin(),
                                    from.stream.bytes.begin() + static_cast<long>(n));
            if (corrupt_at != ~std::uint64_t{0} && &from == &a && moved_ab <= corrupt_at &&
                corrupt_at < moved_ab + n) {
                chunk[corrupt_at - moved_ab] ^= 0x10;
                corrupt_at = ~std::uint64_t{0};
            }
            if (&from == &a) moved_ab += n;
            to.qp->on_bytes(chunk, now);
            budget -= n;
        }
        return true;
    }

    bool step() {
        bool did = false;
        did |= a.qp->poll(now);
        did |= b.qp->poll(now);
        did |= move(a, b);
        did |= move(b, a);
        now += 1000;
        ++steps;
        return did || a.qp->next_deadline() == 0 || b.qp->next_deadline() == 0;
    }

    template <typename Done>
    bool run_until(Done done, std::uint64_t max_steps = 200000) {
        for (std::uint64_t i = 0; i < max_steps; ++i) {
            if (done()) return true;
            if (!step()) return done();
        }
        return done();
    }
    void settle() {
        run_until([] { return false; });
    }

    IwNode a, b;
    std::mt19937_64 rng;
    std::size_t max_cut = 3000;
    std::size_t max_step_bytes = 1u << 20;
    std::uint64_t corrupt_at = ~std::uint64_t{0};  // index into the a->b byte stream
    std::uint64_t moved_ab = 0;
    IwTime now = 1'000'000;
    std::uint64_t steps = 0;
};

inline SendWr iw_send_wr(std::uint64_t id, WrOp op, std::uint32_t lkey, std::uint64_t addr,
                         std::uint32_t len, bool signaled = true) {
    return roce::test::send_wr(id, op, lkey, addr, len, signaled);
}
inline RecvWr iw_recv_wr(std::uint64_t id, std::uint32_t lkey, std::uint64_t addr,
                         std::uint32_t len) {
    return roce::test::recv_wr(id, lkey, addr, len);
}

}  // namespace snic::iwarp::test
