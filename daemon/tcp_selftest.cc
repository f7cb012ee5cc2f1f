#include "daemon/tcp_selftest.h"

#include <rte_cycles.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "proto/crc/crc.h"

namespace snic::daemon {

namespace {

constexpr std::uint64_t kStallSeconds = 30;
constexpr std::uint32_t kRecordMss = 16;  // default record: 16 MSS

std::span<const std::uint8_t> as_u8(std::span<const std::byte> b) {
    return {reinterpret_cast<const std::uint8_t*>(b.data()), b.size()};
}

std::string endpoint_text(net::Ipv4Addr ip, std::uint16_t port) {
    return ip.to_string() + ":" + std::to_string(port);
}

std::string crc_text(std::uint32_t crc) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", crc);
    return buf;
}

double seconds(std::uint64_t from, std::uint64_t to, std::uint64_t hz) {
    return to > from ? static_cast<double>(to - from) / static_cast<double>(hz) : 0.0;
}

}  // namespace

std::vector<std::uint8_t> tcp_pattern(std::uint32_t extra) {
    std::vector<std::uint8_t> p(kTcpPatternPeriod + std::uint64_t{extra});
    std::uint64_t x = 0x736e6963'74637031ull;  // xorshift64*, a fixed seed: "snictcp1"
    for (std::uint32_t i = 0; i < kTcpPatternPeriod; ++i) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = static_cast<std::uint8_t>((x * 0x2545f4914f6cdd1dull) >> 56);
    }
    for (std::uint32_t i = 0; i < extra; ++i) p[kTcpPatternPeriod + i] = p[i % kTcpPatternPeriod];
    return p;
}

// ---- tcp-send -------------------------------------------------------------------------------

TcpSendTest::TcpSendTest(const SelftestSpec& spec, TcpService& tcp, std::uint64_t tsc_hz,
                         std::atomic<bool>& stop)
    : spec_(spec),
      tcp_(tcp),
      stack_(tcp.stack()),
      tsc_hz_(tsc_hz),
      stop_(stop),
      pattern_(tcp_pattern(tcp.stack().config().conn.send_buffer)) {}

void TcpSendTest::fail(std::string why) {
    if (failure_.empty()) failure_ = std::move(why);
    if (stack_.counters(conn_) != nullptr) stack_.abort(conn_);
    finish();
}

void TcpSendTest::finish() {
    phase_ = Phase::done;
    stop_.store(true, std::memory_order_relaxed);
}

bool TcpSendTest::poll(std::uint64_t now) {
    switch (phase_) {
        case Phase::start: {
            const int err = stack_.connect(spec_.dst_ip, spec_.dst_port, *this, conn_);
            if (err != 0) {
                fail("connect to " + endpoint_text(spec_.dst_ip, spec_.dst_port) + ": " +
                     std::strerror(err));
                return true;
            }
            stack_.post_receive(conn_, reply_, 0);
            phase_ = Phase::connecting;
            last_progress_ = now;
            return true;
        }
        case Phase::connecting:
            if (now > last_progress_ + kStallSeconds * tsc_hz_)
                fail("no connection to " + endpoint_text(spec_.dst_ip, spec_.dst_port));
            return false;
        case Phase::sending: {
            bool did = push();
            if (const tcp::TcpCounters* k = stack_.counters(conn_)) {
                const std::uint64_t acked = k->bytes_acked.get();
                if (acked != acked_seen_) {
                    acked_seen_ = acked;
                    last_progress_ = now;
                    did = true;
                }
                if (acked >= spec_.bytes && t_acked_ == 0) t_acked_ = now;
                stack_.info(conn_, info_);
                retransmits_ = k->retransmits.get();
                fast_retransmits_ = k->fast_retransmits.get();
                timeouts_ = k->timeouts.get();
                probes_ = k->tlp_probes.get();
                segments_out_ = k->segments_out.get();
                segments_in_ = k->segments_in.get();
            }
            if (reply_done_) {
                check_reply();
                return true;
            }
            if (now > last_progress_ + kStallSeconds * tsc_hz_)
                fail("the transfer stalled after " + std::to_string(acked_seen_) + " bytes");
            return did;
        }
        case Phase::done:
            return false;
    }
    return false;
}

bool TcpSendTest::push() {
    bool did = false;
    while (sent_ < spec_.bytes) {
        const auto len =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(record_, spec_.bytes - sent_));
        const std::size_t off = sent_ % kTcpPatternPeriod;
        const std::span<const std::uint8_t> rec(pattern_.data() + off, len);
        if (!stack_.send(conn_, std::as_bytes(rec))) break;
        crc_ = crc::Crc32::update(crc_, rec);
        sent_ += len;
        did = true;
    }
    if (sent_ == spec_.bytes && !closed_) {
        stack_.close(conn_);  // half-close: the peer answers to our FIN
        closed_ = true;
    }
    return did;
}

void TcpSendTest::on_tcp_event(const TcpStreamEvent& e) {
    switch (e.kind) {
        case TcpStreamEventKind::connected:
            t_connected_ = last_progress_ = rte_rdtsc();
            record_ = spec_.record != 0 ? spec_.record : kRecordMss * stack_.mss(conn_);
            record_ = std::min<std::uint32_t>(record_, stack_.config().conn.send_buffer);
            phase_ = Phase::sending;
            return;
        case TcpStreamEventKind::mss_changed:
            if (spec_.record == 0) record_ = kRecordMss * static_cast<std::uint32_t>(e.bytes);
            record_ = std::min<std::uint32_t>(record_, stack_.config().conn.send_buffer);
            return;
        case TcpStreamEventKind::recv_done:
            reply_len_ = std::min<std::uint64_t>(e.bytes, reply_.size());
            if (fin_) reply_done_ = true;
            return;
        case TcpStreamEventKind::peer_closed:
            fin_ = true;
            return;
        case TcpStreamEventKind::closed:
        case TcpStreamEventKind::reset:
        case TcpStreamEventKind::timed_out:
        case TcpStreamEventKind::unreachable:
            if (phase_ != Phase::done)
                fail("the connection ended (" +
                     std::string(kTcpStreamEventNames[static_cast<std::size_t>(e.kind)]) +
                     ") after " + std::to_string(acked_seen_) + " bytes acknowledged");
            return;
        default:
            return;
    }
}

void TcpSendTest::check_reply() {
    const std::string_view text(reinterpret_cast<const char*>(reply_.data()), reply_len_);
    peer_answer_ = std::string(text.substr(0, text.find('\n')));
    const std::uint32_t crc = ~crc_;
    const std::string want = std::to_string(spec_.bytes) + " " + crc_text(crc);
    if (peer_answer_ != want) {
        fail("the peer answered '" + peer_answer_ + "', expected '" + want + "'");
        return;
    }
    if (t_acked_ == 0) t_acked_ = rte_rdtsc();
    verified_ = true;
    finish();
}

std::string TcpSendTest::report() const {
    if (!failure_.empty()) return failure_;
    const double s = seconds(t_connected_, t_acked_, tsc_hz_);
    const double mbps = s > 0 ? static_cast<double>(spec_.bytes) / s / 1e6 : 0;
    // The same figures as JSON or as one line of text, in the same order.
    const char* format =
        spec_.json ? "{\"test\":\"tcp-send\",\"peer\":\"%s\",\"bytes\":%llu,\"crc32\":\"%s\","
                     "\"seconds\":%.6f,\"MBps\":%.2f,\"segments_out\":%llu,\"segments_in\":%llu,"
                     "\"retransmits\":%llu,\"fast_retransmits\":%llu,\"timeouts\":%llu,"
                     "\"probes\":%llu,\"mss\":%u,\"cwnd\":%llu,\"srtt_us\":%.1f}"
                   : "%s bytes %llu crc32 %s (peer agrees) in %.3f s = %.1f MB/s ; segments out "
                     "%llu in %llu ; retransmits %llu (fast %llu, timeouts %llu, probes %llu) ; "
                     "mss %u cwnd %llu srtt %.1f us";
    char buf[768];
    std::snprintf(buf, sizeof buf, format, endpoint_text(spec_.dst_ip, spec_.dst_port).c_str(),
                  static_cast<unsigned long long>(spec_.bytes), crc_text(~crc_).c_str(), s, mbps,
                  static_cast<unsigned long long>(segments_out_),
                  static_cast<unsigned long long>(segments_in_),
                  static_cast<unsigned long long>(retransmits_),
                  static_cast<unsigned long long>(fast_retransmits_),
                  static_cast<unsigned long long>(timeouts_),
                  static_cast<unsigned long long>(probes_), info_.mss,
                  static_cast<unsigned long long>(info_.cwnd), info_.srtt / 1e3);
    return buf;
}

// ---- tcp-sink -------------------------------------------------------------------------------

TcpSinkTest::TcpSinkTest(const SelftestSpec& spec, TcpService& tcp, std::uint64_t tsc_hz,
                         std::atomic<bool>& stop)
    : buf_size_(std::max<std::size_t>(tcp.stack().config().conn.recv_window / 4, 4096)),
      spec_(spec),
      tcp_(tcp),
      stack_(tcp.stack()),
      tsc_hz_(tsc_hz),
      stop_(stop) {
    for (Slot& s : slots_) s.bufs = std::make_unique<std::byte[]>(kBufs * buf_size_);
    ended_list_.reserve(spec_.count);
}

bool TcpSinkTest::poll(std::uint64_t) {
    if (listening_ || !failure_.empty()) return false;
    const int err = stack_.listen(spec_.listen_port, 2 * kSlots, *this, listener_);
    if (err != 0) {
        failure_ =
            "listen on port " + std::to_string(spec_.listen_port) + ": " + std::strerror(err);
        finish();
        return true;
    }
    listening_ = true;
    return true;
}

TcpSinkTest::Slot* TcpSinkTest::slot_of(TcpHandle h) {
    for (Slot& s : slots_)
        if (s.conn == h) return &s;
    return nullptr;
}

void TcpSinkTest::post(Slot& s) {
    // Buffers go round the region in order: stream offset x lies in buffer (x / size) % kBufs.
    while (!s.fin && s.posted - s.done < kBufs) {
        const std::size_t b = s.posted % kBufs;
        if (!stack_.post_receive(s.conn, {s.bufs.get() + b * buf_size_, buf_size_}, s.posted))
            return;
        ++s.posted;
    }
}

void TcpSinkTest::maybe_reply(Slot& s) {
    if (!s.fin || s.replied || s.done != s.posted) return;
    const std::string answer = std::to_string(s.bytes) + " " + crc_text(~s.crc) + "\n";
    s.replied = stack_.send(s.conn, std::as_bytes(std::span(answer.data(), answer.size())));
    stack_.close(s.conn);
}

void TcpSinkTest::on_tcp_event(const TcpStreamEvent& e) {
    if (e.kind == TcpStreamEventKind::incoming) {
        for (Slot& s : slots_) {
            if (s.conn) continue;
            if (stack_.accept(e.conn, *this) != 0) return;
            s.conn = e.conn;
            stack_.four_tuple(e.conn, s.tuple);
            s.posted = s.done = s.bytes = 0;
            s.crc = ~0u;
            s.fin = s.replied = false;
            s.t_start = rte_rdtsc();
            s.t_fin = 0;
            post(s);
            return;
        }
        ++refused_;
        stack_.abort(e.conn);
        return;
    }
    Slot* s = slot_of(e.conn);
    if (s == nullptr) return;
    switch (e.kind) {
        case TcpStreamEventKind::recv_done: {
            // Buffers come back in stream order, each holding e.bytes from its start.
            const std::size_t b = e.cookie % kBufs;
            const std::span<const std::byte> got(s->bufs.get() + b * buf_size_, e.bytes);
            s->crc = crc::Crc32::update(s->crc, as_u8(got));
            s->bytes += e.bytes;
            ++s->done;
            post(*s);
            maybe_reply(*s);
            return;
        }
        case TcpStreamEventKind::peer_closed:
            s->fin = true;
            s->t_fin = rte_rdtsc();
            maybe_reply(*s);  // the buffers' recv_done follow; the answer waits for them
            return;
        default:
            break;
    }
    if (!is_terminal(e.kind)) return;
    Ended r;
    r.tuple = s->tuple;
    r.bytes = s->bytes;
    r.crc = ~s->crc;
    r.fin = s->fin;
    r.replied = s->replied;
    r.how = e.kind;
    r.seconds = seconds(s->t_start, s->t_fin != 0 ? s->t_fin : rte_rdtsc(), tsc_hz_);
    if (ended_list_.size() < ended_list_.capacity()) ended_list_.push_back(r);
    s->conn = {};
    if (++ended_ == spec_.count) finish();
}

void TcpSinkTest::finish() {
    if (listening_) stack_.close(listener_);
    listening_ = true;  // never again
    stop_.store(true, std::memory_order_relaxed);
}

std::string TcpSinkTest::report() const {
    if (!failure_.empty()) return failure_;
    std::string out;
    if (spec_.json)
        out = "{\"test\":\"tcp-sink\",\"port\":" + std::to_string(spec_.listen_port) +
              ",\"refused\":" + std::to_string(refused_) + ",\"connections\":[";
    else
        out = std::to_string(ended_) + " connection" + (ended_ == 1 ? "" : "s") + " on port " +
              std::to_string(spec_.listen_port);
    bool first = true;
    for (const Ended& r : ended_list_) {
        const double mbps = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e6 : 0;
        const std::string how(kTcpStreamEventNames[static_cast<std::size_t>(r.how)]);
        char buf[512];
        if (spec_.json) {
            std::snprintf(buf, sizeof buf,
                          "%s{\"peer\":\"%s\",\"bytes\":%llu,\"crc32\":\"%s\",\"fin\":%s,"
                          "\"answered\":%s,\"ended\":\"%s\",\"seconds\":%.6f,\"MBps\":%.2f}",
                          first ? "" : ",",
                          endpoint_text(r.tuple.remote_ip, r.tuple.remote_port).c_str(),
                          static_cast<unsigned long long>(r.bytes), crc_text(r.crc).c_str(),
                          r.fin ? "true" : "false", r.replied ? "true" : "false", how.c_str(),
                          r.seconds, mbps);
        } else {
            std::snprintf(buf, sizeof buf,
                          " ; from %s bytes %llu crc32 %s fin %s answered %s ended %s in %.3f s = "
                          "%.1f MB/s",
                          endpoint_text(r.tuple.remote_ip, r.tuple.remote_port).c_str(),
                          static_cast<unsigned long long>(r.bytes), crc_text(r.crc).c_str(),
                          r.fin ? "yes" : "no", r.replied ? "yes" : "no", how.c_str(), r.seconds,
                          mbps);
        }
        out += buf;
        first = false;
    }
    if (spec_.json) out += "]}";
    return out;
}

std::unique_ptr<Selftest> make_tcp_selftest(const SelftestSpec& spec, TcpService& tcp,
                                            std::uint64_t tsc_hz, std::atomic<bool>& stop) {
    if (spec.name == "tcp-send") return std::make_unique<TcpSendTest>(spec, tcp, tsc_hz, stop);
    if (spec.name == "tcp-sink") return std::make_unique<TcpSinkTest>(spec, tcp, tsc_hz, stop);
    return nullptr;
}

}  // namespace snic::daemon
