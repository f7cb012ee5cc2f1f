// Fakes for the CM agent's unit tests: an Endpoint (a Sink that records every event and can
// answer them by a policy), a FakeLink that carries MADs between two Agents in order and can
// drop the ones a rule picks, and a CmPair: two agents on a link driven by a fake clock.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "proto/cm/agent.h"
#include "proto/cm/mad.h"
#include "proto/cm/messages.h"

namespace snic::cm::test {

inline constexpr std::uint32_t kIpA = 0x0A000001;  // 10.0.0.1
inline constexpr std::uint32_t kIpB = 0x0A000002;  // 10.0.0.2

struct SentMad {
    std::uint32_t from_ip = 0;
    std::uint32_t to_ip = 0;
    Mad mad{};
    AttrId attr() const { return static_cast<AttrId>((mad[16] << 8) | mad[17]); }
    ConstMadData data() const { return ConstMadData(mad.data() + kMadHeaderSize, kMadDataSize); }
};

class Endpoint final : public Sink {
  public:
    Endpoint(std::uint32_t ip, std::deque<SentMad>& wire) : ip_(ip), wire_(wire) {}

    void send_mad(std::uint32_t remote_ip, std::uint32_t remote_qpn, std::uint32_t qkey,
                  std::span<const std::uint8_t> mad) override {
        EXPECT_EQ(remote_qpn, kGsiQpn);
        EXPECT_EQ(qkey, kGsiQkey);
        EXPECT_EQ(mad.size(), kMadSize);
        SentMad s;
        s.from_ip = ip_;
        s.to_ip = remote_ip;
        std::copy(mad.begin(), mad.end(), s.mad.begin());
        sent.push_back(s);
        wire_.push_back(s);
    }
    void deliver(const Event& e) override {
        events.push_back(e);
        private_data.emplace_back(e.private_data.begin(), e.private_data.end());
        if (on_event) on_event(e);
    }

    std::size_t count(EventType t) const {
        std::size_t n = 0;
        for (const Event& e : events) n += e.type == t;
        return n;
    }
    std::optional<Event> last(EventType t) const {
        for (auto it = events.rbegin(); it != events.rend(); ++it)
            if (it->type == t) return *it;
        return std::nullopt;
    }
    std::size_t sent_count(AttrId a) const {
        std::size_t n = 0;
        for (const SentMad& s : sent) n += s.attr() == a;
        return n;
    }
    std::optional<SentMad> last_sent(AttrId a) const {
        for (auto it = sent.rbegin(); it != sent.rend(); ++it)
            if (it->attr() == a) return *it;
        return std::nullopt;
    }

    std::vector<Event> events;
    std::vector<std::vector<std::uint8_t>> private_data;  // copied, one per event
    std::vector<SentMad> sent;
    std::function<void(const Event&)> on_event;  // answers events (may call the agent)

  private:
    std::uint32_t ip_;
    std::deque<SentMad>& wire_;
};

// Two agents, A (10.0.0.1) and B (10.0.0.2), on an in-order link; `drop` decides for each
// MAD (in the order sent) whether the link loses it.
struct CmPair {
    explicit CmPair(AgentConfig ca = config(kIpA, 11), AgentConfig cb = config(kIpB, 22))
        : ep_a(kIpA, wire), ep_b(kIpB, wire), a(ep_a, ca), b(ep_b, cb) {}

    static AgentConfig config(std::uint32_t ip, std::uint32_t seed) {
        AgentConfig c;
        c.local_ip = ip;
        c.id_key[0] = static_cast<std::uint8_t>(seed);
        c.id_key[1] = static_cast<std::uint8_t>(seed >> 8);
        c.local_cm_response_timeout = 10;  // 4.2 ms
        c.max_cm_retries = 3;
        c.timewait_ns = 50'000'000;
        c.mra_service_timeout = 12;
        return c;
    }
    static ConnectParams params(std::uint32_t qpn = 0x111) {
        ConnectParams p;
        p.local_ip = kIpA;
        p.remote_ip = kIpB;
        p.service_id = 0x0000000001060000ULL | 4791;
        p.qp.qpn = qpn;
        p.qp.psn = 0xABCDE;
        p.qp.responder_resources = 4;
        p.qp.initiator_depth = 2;
        p.cm_response_timeout = 10;  // 4.2 ms
        p.max_cm_retries = 3;
        return p;
    }

    // Carries every MAD in flight (and those they cause) to its destination.
    void pump() {
        while (!wire.empty()) {
            SentMad s = wire.front();
            wire.pop_front();
            if (drop && drop(s)) {
                ++dropped;
                continue;
            }
            Agent& to = s.to_ip == kIpA ? a : b;
            to.receive(s.from_ip, kGsiQpn, s.mad, now);
        }
    }
    // Runs both agents' timers up to `until`, carrying what they send.
    void run_until(std::uint64_t until) {
        pump();
        for (;;) {
            const std::uint64_t d = std::min(a.next_deadline(), b.next_deadline());
            if (d > until) break;
            now = std::max(now, d);
            a.poll(now);
            b.poll(now);
            pump();
        }
        now = until;
    }
    void advance(std::uint64_t ns) { run_until(now + ns); }

    // A connects, B accepts, A confirms.
    ConnId establish(ConnId* passive = nullptr, std::uint32_t qpn = 0x111,
                     std::uint8_t req_timeout = 10) {
        ep_b.on_event = [&](const Event& e) {
            if (e.type == EventType::req_received) {
                QpInfo q;
                q.qpn = 0x222;
                q.psn = 0x12345;
                if (passive) *passive = e.id;
                EXPECT_TRUE(b.accept(e.id, q, {}, now).ok());
            }
        };
        ep_a.on_event = [&](const Event& e) {
            if (e.type == EventType::rep_received) {
                EXPECT_TRUE(a.confirm(e.id, {}, now).ok());
            }
        };
        ConnectParams cp = params(qpn);
        cp.cm_response_timeout = req_timeout;
        auto id = a.connect(cp, now);
        EXPECT_TRUE(id.ok());
        pump();
        ep_a.on_event = nullptr;
        ep_b.on_event = nullptr;
        return id.ok() ? *id : 0;
    }

    std::deque<SentMad> wire;
    Endpoint ep_a, ep_b;
    Agent a, b;
    std::function<bool(const SentMad&)> drop;
    std::size_t dropped = 0;
    std::uint64_t now = 1'000'000;
};

// Drops the first `n` MADs of attribute `attr` (then lets them through).
inline std::function<bool(const SentMad&)> drop_first(AttrId attr, int n) {
    auto left = std::make_shared<int>(n);
    return [attr, left](const SentMad& s) {
        if (s.attr() != attr || *left == 0) return false;
        --*left;
        return true;
    };
}

inline constexpr std::uint64_t interval_ns(std::uint8_t t) {
    return std::uint64_t{4096} << t;
}

}  // namespace snic::cm::test
