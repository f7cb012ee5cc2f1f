#include "daemon/selftest.h"

#include <rte_mbuf.h>

#include <algorithm>
#include <cstdio>

#include "proto/net/icmp.h"

namespace snic::daemon {

namespace {
constexpr std::uint64_t kResolveSeconds = 5;
constexpr std::uint64_t kEchoTimeoutSeconds = 1;
}  // namespace

ArpPing::ArpPing(Port& from, net::Ipv4Addr target, std::uint32_t count, std::uint64_t tsc_hz,
                 std::atomic<bool>& stop)
    : from_(from), target_(target), count_(count), tsc_hz_(tsc_hz), stop_(stop) {
    rtts_.reserve(count);
    from_.set_echo_listener(this);
}

bool ArpPing::poll(std::uint64_t now) {
    switch (phase_) {
        case Phase::start:
            if (!from_.ip().contains(target_)) {
                failure_ = target_.to_string() + " is not on the subnet of " + from_.name();
                finish();
                return true;
            }
            deadline_ = now + kResolveSeconds * tsc_hz_;
            phase_ = Phase::resolving;
            [[fallthrough]];
        case Phase::resolving:
            if (auto mac = from_.resolve(target_, now)) {
                peer_mac_ = *mac;
                phase_ = Phase::pinging;
                send_echo(now);
                return true;
            }
            if (now > deadline_) {
                failure_ = "no ARP reply from " + target_.to_string();
                finish();
            }
            return false;
        case Phase::pinging:
            if (in_flight_ && now > deadline_) {  // lost: go on with the next
                in_flight_ = false;
                if (sent_ == count_) {
                    finish();
                    return true;
                }
                send_echo(now);
                return true;
            }
            if (!in_flight_) {
                if (sent_ == count_) {
                    finish();
                } else {
                    send_echo(now);
                }
                return true;
            }
            return false;
        case Phase::done:
            return false;
    }
    return false;
}

void ArpPing::send_echo(std::uint64_t now) {
    rte_mbuf* m = from_.alloc();
    if (m == nullptr) {
        failure_ = "mbuf pool exhausted";
        finish();
        return;
    }
    net::EchoRequest req;
    req.src_mac = from_.mac();
    req.dst_mac = peer_mac_;
    req.src_ip = from_.ip().addr;
    req.dst_ip = target_;
    req.id = kEchoId;
    req.seq = ++seq_;
    const std::size_t len =
        net::build_icmp_echo_request({rte_pktmbuf_mtod(m, std::uint8_t*), rte_pktmbuf_tailroom(m)}, req);
    m->data_len = static_cast<std::uint16_t>(len);
    m->pkt_len = static_cast<std::uint32_t>(len);
    from_.send(m);
    ++sent_;
    sent_at_ = now;
    deadline_ = now + kEchoTimeoutSeconds * tsc_hz_;
    in_flight_ = true;
}

void ArpPing::on_echo_reply(std::uint16_t id, std::uint16_t seq, std::uint64_t now) {
    if (id != kEchoId || !in_flight_ || seq != seq_) return;  // late or foreign
    rtts_.push_back(now - sent_at_);
    in_flight_ = false;
}

void ArpPing::finish() {
    phase_ = Phase::done;
    from_.set_echo_listener(nullptr);
    stop_.store(true, std::memory_order_relaxed);
}

bool ArpPing::passed() const { return failure_.empty() && rtts_.size() == count_; }

std::string ArpPing::report() const {
    if (!failure_.empty()) return failure_;
    if (rtts_.empty()) return "no echo reply from " + target_.to_string();
    std::vector<std::uint64_t> sorted = rtts_;
    std::sort(sorted.begin(), sorted.end());
    std::uint64_t sum = 0;
    for (auto r : sorted) sum += r;
    auto us = [this](double cycles) { return cycles * 1e6 / static_cast<double>(tsc_hz_); };
    const std::size_t p99 = std::min(sorted.size() - 1, sorted.size() * 99 / 100);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s is at %s ; %zu/%u echo replies, rtt min/avg/max/p99 = %.1f/%.1f/%.1f/%.1f us",
                  target_.to_string().c_str(), peer_mac_.to_string().c_str(), rtts_.size(), count_,
                  us(static_cast<double>(sorted.front())),
                  us(static_cast<double>(sum) / static_cast<double>(sorted.size())),
                  us(static_cast<double>(sorted.back())), us(static_cast<double>(sorted[p99])));
    return buf;
}

}  // namespace snic::daemon
