#include "daemon/selftest.h"

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/latency.h"
#include "proto/net/checksum.h"
#include "proto/net/ethernet.h"
#include "proto/net/icmp.h"
#include "proto/net/ipv4.h"
#include "proto/net/udp.h"

namespace snic::daemon {

namespace {
constexpr std::uint64_t kResolveSeconds = 5;
constexpr std::uint64_t kRoundTimeoutSeconds = 1;
constexpr std::uint64_t kStallSeconds = 5;
constexpr std::uint32_t kArpPingSize = 56;  // ping(8)'s default payload
constexpr std::uint32_t kRawPingSize = 8;
constexpr std::uint32_t kRawBwSize = 65536;

std::uint32_t div_up(std::uint64_t a, std::uint64_t b) {
    return static_cast<std::uint32_t>((a + b - 1) / b);
}

// Resolves `target` from `from`, giving it kResolveSeconds from the first call (which
// sets `deadline`, 0 until then); sets `failure` when the subnet is wrong or time runs
// out. Returns the MAC once known.
std::optional<net::MacAddr> resolve_peer(Port& from, net::Ipv4Addr target, std::uint64_t now,
                                         std::uint64_t tsc_hz, std::uint64_t& deadline,
                                         std::string& failure) {
    if (deadline == 0) deadline = now + kResolveSeconds * tsc_hz;
    if (!from.ip().contains(target)) {
        failure = target.to_string() + " is not on the subnet of " + from.name();
        return std::nullopt;
    }
    if (auto mac = from.resolve(target, now)) return mac;
    if (now > deadline) failure = "no ARP reply from " + target.to_string();
    return std::nullopt;
}
}  // namespace

std::uint32_t icmp_payload_per_frame(std::uint16_t mtu) {
    return mtu - net::kIpv4MinHdrLen - sizeof(net::IcmpEchoHdr);
}

// ---- Pinger ------------------------------------------------------------------------------

Pinger::Pinger(const SelftestSpec& spec, Port& from, Port& to, std::uint64_t tsc_hz,
               std::atomic<bool>& stop)
    : spec_(spec),
      from_(from),
      target_(to.ip().addr),
      tsc_hz_(tsc_hz),
      stop_(stop),
      size_(spec.size != 0            ? spec.size
            : spec.name == "arp-ping" ? kArpPingSize
                                      : kRawPingSize),
      per_frame_(icmp_payload_per_frame(std::min(from.mtu(), to.mtu()))),
      frames_(div_up(size_, per_frame_)),
      refused_(from),
      message_(size_),
      slice_sums_(frames_) {
    for (std::size_t i = 0; i < message_.size(); ++i)
        message_[i] = static_cast<std::uint8_t>(i * 7 + 1);
    for (std::uint32_t f = 0; f < frames_; ++f) {
        const std::uint32_t off = f * per_frame_;
        slice_sums_[f] = net::csum_add({message_.data() + off, std::min(per_frame_, size_ - off)});
    }
    rtts_.reserve(spec.count);
    from_.set_echo_listener(this);
}

Pinger::~Pinger() {
    from_.set_echo_listener(nullptr);
}

bool Pinger::poll(std::uint64_t now) {
    switch (phase_) {
        case Phase::resolving:
            if (auto mac = resolve_peer(from_, target_, now, tsc_hz_, deadline_, failure_)) {
                peer_mac_ = *mac;
                phase_ = Phase::pinging;
                refused_.take();  // what went before is not ours
                start_round(now);
                return true;
            }
            if (!failure_.empty()) finish();
            return false;
        case Phase::pinging: {
            if (const std::uint64_t refused = refused_.take(); refused != 0 && in_round_) {
                const auto back =
                    static_cast<std::uint32_t>(std::min<std::uint64_t>(refused, last_burst_));
                sent_ -= back;  // the tail of the last burst: send it again
                resent_ += back;
            }
            last_burst_ = 0;
            if (in_round_ && now > deadline_) {  // lost: go on with the next round
                in_round_ = false;
                ++lost_;
            }
            if (!in_round_) {
                if (rounds_ == spec_.count + spec_.warmup) {
                    finish();
                } else {
                    start_round(now);
                }
                return true;
            }
            return send_burst();
        }
        case Phase::done:
            return false;
    }
    return false;
}

void Pinger::start_round(std::uint64_t now) {
    base_seq_ = static_cast<std::uint16_t>(base_seq_ + sent_);
    sent_ = got_ = 0;
    ++rounds_;
    in_round_ = true;
    deadline_ = now + kRoundTimeoutSeconds * tsc_hz_;
    round_start_ = rte_rdtsc();
    send_burst();
}

bool Pinger::send_burst() {
    std::uint32_t n = 0;
    while (n < kDefaultBurst && sent_ < frames_ && sent_ - got_ < kMaxInFlight && send_frame()) ++n;
    last_burst_ = n;
    return n != 0;
}

bool Pinger::send_frame() {
    rte_mbuf* m = from_.alloc();
    if (m == nullptr) {  // the pool is busy: again on the next poll
        refused_.alloc_failed();
        return false;
    }
    // The frame's slice of the message is copied out of the message buffer (as a NIC
    // reads it from memory); its share of the ICMP checksum was summed up front.
    const std::uint32_t off = sent_ * per_frame_;
    const std::uint32_t payload = std::min(per_frame_, size_ - off);
    const auto icmp_len = static_cast<std::uint16_t>(sizeof(net::IcmpEchoHdr) + payload);
    const std::size_t len = net::kEthHdrLen + net::kIpv4MinHdrLen + icmp_len;
    const std::size_t frame_len = std::max<std::size_t>(len, net::kEthMinFrame);
    if (frame_len > rte_pktmbuf_tailroom(m)) {
        rte_pktmbuf_free(m);
        failure_ = "an echo frame does not fit an mbuf";
        finish();
        return false;
    }
    const auto seq = static_cast<std::uint16_t>(base_seq_ + sent_);
    auto* p = rte_pktmbuf_mtod(m, std::uint8_t*);
    auto* msg = p + net::kEthHdrLen + net::kIpv4MinHdrLen;
    auto& icmp = *reinterpret_cast<net::IcmpEchoHdr*>(msg);
    net::write_eth(*reinterpret_cast<net::EthHdr*>(p), peer_mac_, from_.mac(),
                   net::EtherType::ipv4);
    net::write_ipv4(*reinterpret_cast<net::Ipv4Hdr*>(p + net::kEthHdrLen), from_.ip().addr, target_,
                    net::IpProto::icmp, icmp_len, seq);
    icmp.type = static_cast<std::uint8_t>(net::IcmpType::echo_request);
    icmp.code = 0;
    icmp.checksum = 0;
    icmp.id = kEchoId;
    icmp.seq = seq;
    std::memcpy(msg + sizeof(net::IcmpEchoHdr), message_.data() + off, payload);
    icmp.checksum =
        net::csum_finish(net::csum_add({msg, sizeof(net::IcmpEchoHdr)}, slice_sums_[sent_]));
    std::memset(p + len, 0, frame_len - len);  // the padding of a short frame
    m->data_len = static_cast<std::uint16_t>(frame_len);
    m->pkt_len = static_cast<std::uint32_t>(frame_len);
    from_.send(m);
    ++sent_;
    return true;
}

void Pinger::on_echo_reply(std::uint16_t id, std::uint16_t seq, std::uint64_t) {
    const auto off = static_cast<std::uint16_t>(seq - base_seq_);
    if (id != kEchoId || !in_round_ || off >= sent_) return;  // late or foreign
    if (++got_ < frames_) return;
    in_round_ = false;
    if (rounds_ > spec_.warmup) rtts_.push_back(rte_rdtsc() - round_start_);
}

void Pinger::finish() {
    phase_ = Phase::done;
    from_.set_echo_listener(nullptr);
    stop_.store(true, std::memory_order_relaxed);
}

bool Pinger::passed() const {
    return failure_.empty() && rtts_.size() == spec_.count;
}

std::string Pinger::report() const {
    if (!failure_.empty()) return failure_;
    if (rtts_.empty()) return "no echo reply from " + target_.to_string();
    std::vector<double> us(rtts_.size());
    std::transform(rtts_.begin(), rtts_.end(), us.begin(), [this](std::uint64_t c) {
        return static_cast<double>(c) * 1e6 / static_cast<double>(tsc_hz_);
    });
    if (!spec_.samples.empty()) {
        if (FILE* f = std::fopen(spec_.samples.c_str(), "w")) {
            for (double v : us) std::fprintf(f, "%.3f\n", v);
            std::fclose(f);
        }
    }
    const LatencySummary s = summarize_latency(us);
    char buf[512];
    if (spec_.name == "arp-ping") {
        std::snprintf(
            buf, sizeof buf,
            "%s is at %s ; %zu/%u echo replies, rtt min/avg/max/p99 = %.1f/%.1f/%.1f/%.1f us",
            target_.to_string().c_str(), peer_mac_.to_string().c_str(), rtts_.size(), spec_.count,
            s.min, s.mean, s.max, s.p99);
    } else if (spec_.json) {
        std::snprintf(buf, sizeof buf,
                      "{\"test\":\"raw-ping\",\"size\":%u,\"count\":%zu,\"lost\":%u,\"frames\":%u,"
                      "\"tx_resent\":%llu,\"rtt_us\":{\"min\":%.3f,\"median\":%.3f,\"mean\":%.3f,"
                      "\"p99\":%.3f,"
                      "\"p999\":%.3f,\"max\":%.3f}}",
                      size_, rtts_.size(), lost_, frames_, static_cast<unsigned long long>(resent_),
                      s.min, s.median, s.mean, s.p99, s.p999, s.max);
    } else {
        std::snprintf(
            buf, sizeof buf,
            "%s size %u B (%u frame%s) ; %zu/%u round trips, rtt min/median/mean/p99/p99.9/max "
            "= %.2f/%.2f/%.2f/%.2f/%.2f/%.2f us",
            target_.to_string().c_str(), size_, frames_, frames_ == 1 ? "" : "s", rtts_.size(),
            spec_.count, s.min, s.median, s.mean, s.p99, s.p999, s.max);
    }
    std::string line = buf;
    if (resent_ != 0 && !spec_.json)
        line += " ; " + std::to_string(resent_) + " refused frames sent again";
    return line;
}

// ---- Streamer ----------------------------------------------------------------------------

Streamer::Streamer(const SelftestSpec& spec, Port& from, Port& to, std::uint64_t tsc_hz,
                   std::atomic<bool>& stop)
    : spec_(spec),
      from_(from),
      to_(to),
      tsc_hz_(tsc_hz),
      stop_(stop),
      size_(spec.size != 0 ? spec.size : kRawBwSize),
      per_frame_(std::min(from.mtu(), to.mtu()) - net::kIpv4MinHdrLen - net::kUdpHdrLen),
      frames_per_msg_(div_up(size_, per_frame_)),
      total_frames_(std::uint64_t{frames_per_msg_} * spec.count),
      refused_(from),
      source_(size_),
      sink_(size_) {
    for (std::size_t i = 0; i < source_.size(); ++i) source_[i] = static_cast<std::uint8_t>(i * 7);
    to_.set_udp_hook({&Streamer::on_rx, this});
}

Streamer::~Streamer() {
    to_.set_udp_hook({});
}

void Streamer::on_rx(void* ctx, Port&, rte_mbuf* m, const net::RxFrame& f, std::uint64_t) {
    auto* self = static_cast<Streamer*>(ctx);
    const std::size_t len = f.l4_length - net::kUdpHdrLen;
    if (self->rx_msg_off_ + len > self->sink_.size()) self->rx_msg_off_ = 0;  // not ours
    std::memcpy(self->sink_.data() + self->rx_msg_off_,
                rte_pktmbuf_mtod(m, const std::uint8_t*) + f.l4_offset + net::kUdpHdrLen, len);
    self->rx_msg_off_ += len;
    if (self->rx_msg_off_ == self->sink_.size()) self->rx_msg_off_ = 0;
    ++self->received_;
    rte_pktmbuf_free(m);
}

bool Streamer::poll(std::uint64_t now) {
    switch (phase_) {
        case Phase::resolving:
            if (auto mac = resolve_peer(from_, to_.ip().addr, now, tsc_hz_, deadline_, failure_)) {
                peer_mac_ = *mac;
                phase_ = Phase::streaming;
                refused_.take();  // what went before is not ours
                start_ = last_progress_ = now;
                return true;
            }
            if (!failure_.empty()) finish();
            return false;
        case Phase::streaming: {
            if (const std::uint64_t refused = refused_.take(); refused != 0) {
                const std::uint64_t back = std::min<std::uint64_t>(refused, last_burst_);
                sent_ -= back;  // the tail of the last burst: send it again
                resent_ += back;
            }
            last_burst_ = 0;
            const std::uint64_t got = received_;
            if (got != seen_) {
                seen_ = got;
                last_progress_ = now;
            }
            if (got >= total_frames_) {
                end_ = now;
                finish();
                return true;
            }
            if (now - last_progress_ > kStallSeconds * tsc_hz_) {
                failure_ = "the stream stalled: " + std::to_string(got) + " of " +
                           std::to_string(total_frames_) + " frames arrived";
                finish();
                return true;
            }
            const net::UdpFlow flow{from_.mac(),   peer_mac_,    from_.ip().addr,
                                    to_.ip().addr, kDiscardPort, kDiscardPort};
            for (;
                 last_burst_ < kDefaultBurst && sent_ < total_frames_ && sent_ - got < kMaxInFlight;
                 ++last_burst_) {
                rte_mbuf* m = from_.alloc();
                if (m == nullptr) {  // the pool is busy: again on the next poll
                    refused_.alloc_failed();
                    break;
                }
                const auto off = static_cast<std::uint32_t>(sent_ % frames_per_msg_) * per_frame_;
                const std::uint32_t len = std::min(size_ - off, per_frame_);
                auto* frame = rte_pktmbuf_mtod(m, std::uint8_t*);
                std::memcpy(frame + net::kUdpFrameOverhead, source_.data() + off, len);
                const std::size_t flen = net::build_udp_frame(
                    {frame, rte_pktmbuf_tailroom(m)}, flow, static_cast<std::uint16_t>(len), false);
                m->data_len = static_cast<std::uint16_t>(flen);
                m->pkt_len = static_cast<std::uint32_t>(flen);
                from_.send(m);
                ++sent_;
            }
            return last_burst_ != 0;
        }
        case Phase::done:
            return false;
    }
    return false;
}

void Streamer::finish() {
    phase_ = Phase::done;
    stop_.store(true, std::memory_order_relaxed);
}

bool Streamer::passed() const {
    return failure_.empty() && end_ > start_;
}

std::string Streamer::report() const {
    if (!failure_.empty()) return failure_;
    const double seconds = static_cast<double>(end_ - start_) / static_cast<double>(tsc_hz_);
    const double msgs = spec_.count / seconds;
    const double gbps = msgs * size_ * 8 / 1e9;
    char buf[384];
    if (spec_.json) {
        std::snprintf(
            buf, sizeof buf,
            "{\"test\":\"raw-bw\",\"size\":%u,\"messages\":%u,\"frames\":%llu,"
            "\"tx_resent\":%llu,\"seconds\":%.6f,\"msg_rate_mpps\":%.4f,\"bw_gbps\":%.3f}",
            size_, spec_.count, static_cast<unsigned long long>(total_frames_),
            static_cast<unsigned long long>(resent_), seconds, msgs / 1e6, gbps);
    } else {
        std::snprintf(buf, sizeof buf,
                      "%s size %u B ; %u messages (%llu frames) in %.3f s = %.4f Mmsg/s, %.3f Gb/s",
                      to_.ip().addr.to_string().c_str(), size_, spec_.count,
                      static_cast<unsigned long long>(total_frames_), seconds, msgs / 1e6, gbps);
    }
    std::string line = buf;
    if (resent_ != 0 && !spec_.json)
        line += " ; " + std::to_string(resent_) + " refused frames sent again";
    return line;
}

std::unique_ptr<Selftest> make_selftest(const SelftestSpec& spec, Port& from, Port& to,
                                        std::uint64_t tsc_hz, std::atomic<bool>& stop) {
    if (spec.name == "raw-bw") return std::make_unique<Streamer>(spec, from, to, tsc_hz, stop);
    return std::make_unique<Pinger>(spec, from, to, tsc_hz, stop);
}

}  // namespace snic::daemon
