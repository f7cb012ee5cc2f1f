// libFuzzer target: one TCP connection (proto/tcp/connection.h) opened actively, passively
// (from a SYN the fuzzer builds) or never, fed its peer's segments: built from chosen fields
// (flags, sequence and acknowledgment numbers near the connection's windows or anywhere,
// window, MSS, window scale, SACK-permitted, timestamps, SACK blocks near the data in
// flight, payload), or with a raw header and options, or corrupted; and arbitrary bytes to
// parse_segment alone; interleaved with the application's records and receive buffers,
// time passing (timers), path MTU reports, a full transmit path, close and abort. The peer's
// byte at sequence number s is always peer_byte(s) and ours at offset o our_byte(o), so both
// streams are checked byte for byte.
// Asserts: a segment the builder writes parses back to the same fields, one corrupt byte
// fails its checksum, and what parse_segment accepts lies inside the bytes given. After
// every engine call: each segment sent parses with a good checksum, between the
// connection's ports; its payload is our stream at its offset, never past what was queued,
// within mss() (options included), and new data within the peer's window; SYN is at the
// ISS, FIN right after the data queued before close(); its ACK field is RCV.NXT (received()
// and the peer's FIN); its window (scaled) never above recv_window; mss() (with options)
// stays between kMinSendMss and the MSS we announce; what info() counts as queued and
// unacknowledged is what the application gave, and send_space() within the send buffer. The bytes
// in the posted buffers up to received() are the peer's stream in order, and past it hold either
// the peer's byte for that place or what was there; buffers complete in posting order with
// min(length, received() - start) bytes, short only once the stream ended; readable totals never
// fall; one terminal event, none after it. send() takes a record of at most send_space() bytes
// while the connection is open for sending; post_receive() refuses only with the ring full or the
// stream over.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "proto/net/checksum.h"
#include "proto/tcp/connection.h"
#include "proto/tcp/segment.h"
#include "tests/fuzz/fuzz_support.h"

namespace snic::fuzz {
namespace {

using namespace snic::tcp;

// The peer's stream: the byte at sequence number s (any s, so that any segment the fuzzer
// builds carries the right bytes for its place).
std::uint8_t peer_byte(Seq s) {
    return static_cast<std::uint8_t>((s * 2654435761u) >> 24);
}
// What a posted buffer holds before the engine writes into it.
constexpr std::uint8_t kFill = 0x5C;
// Our stream: the byte at data offset o (the first data byte is offset 1).
std::uint8_t our_byte(std::uint64_t o) {
    return static_cast<std::uint8_t>((o * 0x9E3779B1u) >> 11 ^ o);
}

class Wire final : public TcpWire {
  public:
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        if (full) return {};
        buf_.assign(len, 0xEE);
        return buf_;
    }
    void tx_send(std::size_t len) override {
        SNIC_FUZZ_REQUIRE(len <= buf_.size());
        buf_.resize(len);
        out.push_back(buf_);
    }
    bool full = false;
    std::deque<std::vector<std::uint8_t>> out;

  private:
    std::vector<std::uint8_t> buf_;
};

void store16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}
void store32(std::uint8_t* p, std::uint32_t v) {
    store16(p, static_cast<std::uint16_t>(v >> 16));
    store16(p + 2, static_cast<std::uint16_t>(v));
}
std::uint32_t load32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

// parse_segment's contract on what it accepts.
void check_parsed(std::span<const std::uint8_t> bytes, const Segment& s) {
    SNIC_FUZZ_REQUIRE(s.header_length >= kTcpMinHdrLen && s.header_length <= kTcpMaxHdrLen);
    SNIC_FUZZ_REQUIRE(s.header_length % 4 == 0 && s.header_length <= bytes.size());
    SNIC_FUZZ_REQUIRE(s.payload.data() == bytes.data() + s.header_length);
    SNIC_FUZZ_REQUIRE(s.payload.size() == bytes.size() - s.header_length);
    SNIC_FUZZ_REQUIRE(s.opts.nsack <= kMaxSackBlocks);
}

class TcpDriver {
  public:
    explicit TcpDriver(Input& in) {
        const std::uint8_t o = in.u8();
        v6_ = (o & 1) != 0;
        if (v6_) {
            cfg_.local.addr.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
            cfg_.remote.addr.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
        } else {
            cfg_.local.addr = IpAddr::v4(net::Ipv4Addr{0x0a000001});
            cfg_.remote.addr = IpAddr::v4(net::Ipv4Addr{0x0a000002});
        }
        cfg_.local.port = 4000;
        cfg_.remote.port = 5000;
        cfg_.sack = (o & 2) == 0;
        cfg_.timestamps = (o & 4) == 0;
        cfg_.window_scale = (o & 8) == 0;
        cfg_.keepalive = (o & 16) != 0;
        if (cfg_.keepalive) {
            cfg_.keepalive_idle = 10 * kSec;  // short, so that probes come within a run
            cfg_.keepalive_interval = 1 * kSec;
            cfg_.keepalive_probes = 1 + in.u8() % 4;
        }
        cfg_.fin_wait_2_timeout = 5 * kSec;  // short, so that it can end within a run
        open_mode_ = (o >> 5) & 3;
        cfg_.mtu = 128 + in.u16() % 9000;
        cfg_.send_buffer = 64 + in.u16() % 16384;
        cfg_.max_records = 1 + in.u8() % 32;
        cfg_.recv_window = 1 + in.u16() % 32768;
        cfg_.max_recv_buffers = 1 + in.u8() % 8;
        cfg_.max_retries = in.u8() % 8;
        cfg_.syn_retries = in.u8() % 4;
        cfg_.max_burst = 1 + in.u8() % 64;
        for (std::size_t i = 0; i < cfg_.isn_key.size(); ++i)
            cfg_.isn_key[i] = static_cast<std::uint8_t>(i * 7 + 1);
        SNIC_FUZZ_REQUIRE(tcp_config_error(cfg_) == nullptr);
        announce_ = cfg_.mtu - (v6_ ? 40u : 20u) - 20u;
        peer_iss_ = in.u32();
        conn_ = std::make_unique<TcpConnection>(cfg_, wire_);
        if (open_mode_ == 0) {
            opened_ = true;
            call([&] { conn_->open_active(now_); });
        }
        for (std::uint32_t i = 0; i < (in.u8() & 3); ++i) post(64 << i);
    }

    void run(Input& in) {
        for (int step = 0; step < 200 && !in.empty(); ++step) {
            switch (in.u8() % 12) {
                case 0:
                case 1:
                case 2:
                case 3:
                    built_segment(in);
                    break;
                case 4:
                    raw_header_segment(in);
                    break;
                case 5:
                    parse_only(in);
                    break;
                case 6:
                case 7:
                    app_send(in);
                    break;
                case 8:
                    post(1 + in.u16() % 2048);
                    break;
                case 9:
                    advance(in);
                    break;
                case 10:
                    wire_.full = (in.u8() & 3) == 0;
                    poll_if_due();
                    break;
                case 11:
                    control(in);
                    break;
            }
        }
        wire_.full = false;
        for (int i = 0; i < 16; ++i) {
            const TcpTime d = conn_->next_deadline();
            if (d == kNever) break;
            now_ = std::max(now_, d);
            call([&] { conn_->poll(now_); });
        }
        const std::uint64_t got = conn_->received();
        for (const Buf& b : bufs_) check_buffer(b, 0, got);
    }

  private:
    struct Buf {
        std::vector<std::uint8_t> data;
        std::uint64_t start = 0;  // stream position of data[0] (0: the first data byte)
        std::uint64_t cookie = 0;
    };

    // --- the engine's calls, and the checks after each ------------------------------------

    template <typename F>
    void call(F&& f) {
        // What poll() may send against: the window and SND.UNA as they stand before it.
        const TcpInfo before = conn_->info();
        snd_una_ = snd_max_ - before.unacked;
        snd_wnd_ = before.snd_wnd;
        f();
        if (synced_or_syn_received()) have_irs_ = true;
        check_sent();
        check_received();
        drain();
        check_views();
    }

    void poll_if_due() {
        if (conn_->next_deadline() <= now_) call([&] { conn_->poll(now_); });
    }

    bool synced_or_syn_received() const {
        const TcpState s = conn_->state();
        return s != TcpState::closed && s != TcpState::syn_sent;
    }

    Seq rcv_nxt_wire() const {
        return conn_->irs() + 1 + static_cast<Seq>(conn_->received()) + (peer_fin_ ? 1 : 0);
    }

    void check_sent() {
        const TcpInfo info = conn_->info();
        while (!wire_.out.empty()) {
            const std::vector<std::uint8_t> b = std::move(wire_.out.front());
            wire_.out.pop_front();
            Segment s;
            const ParseError e = parse_segment(
                b,
                pseudo_sum(cfg_.local.addr, cfg_.remote.addr, static_cast<std::uint32_t>(b.size())),
                s);
            SNIC_FUZZ_REQUIRE(e == ParseError::none);
            check_parsed(b, s);
            SNIC_FUZZ_REQUIRE(s.src_port == cfg_.local.port && s.dst_port == cfg_.remote.port);
            if (s.has(flag::rst)) {
                SNIC_FUZZ_REQUIRE(s.payload.empty() && !s.has(flag::syn) && !s.has(flag::fin));
                continue;
            }
            const std::int64_t off = seq_diff(s.seq, conn_->iss());
            SNIC_FUZZ_REQUIRE(off >= 0);  // probes go at SND.UNA - 1, and SND.UNA >= 1 then
            if (s.has(flag::syn)) {
                SNIC_FUZZ_REQUIRE(off == 0 && s.payload.empty() && !s.has(flag::fin));
                SNIC_FUZZ_REQUIRE(s.opts.has_mss && s.opts.mss == announce_);
            }
            const std::uint64_t len = s.payload.size();
            if (len > 0) {
                SNIC_FUZZ_REQUIRE(off >= 1);
                const std::uint64_t o = static_cast<std::uint64_t>(off);
                SNIC_FUZZ_REQUIRE(o + len <= 1 + app_sent_);
                for (std::uint64_t i = 0; i < len; ++i)
                    SNIC_FUZZ_REQUIRE(s.payload[i] == our_byte(o + i));
                // Payload and options within the MSS (mss() is the payload's share).
                const std::uint32_t opts = s.header_length - kTcpMinHdrLen;
                SNIC_FUZZ_REQUIRE(len <= conn_->mss());
                SNIC_FUZZ_REQUIRE(len + opts <= conn_->mss() + (info.timestamps ? 12u : 0u));
                // New data lies within the window the peer offered.
                if (o + len > snd_max_) SNIC_FUZZ_REQUIRE(o + len <= snd_una_ + snd_wnd_);
            }
            if (s.has(flag::fin)) {
                SNIC_FUZZ_REQUIRE(fin_set_);
                SNIC_FUZZ_REQUIRE(off >= 1 && static_cast<std::uint64_t>(off) + len == 1 + fin_at_);
            }
            if (off >= 0) {
                const std::uint64_t end = static_cast<std::uint64_t>(off) + s.seq_len();
                snd_max_ = std::max(snd_max_, end);
            }
            if (s.has(flag::ack)) {
                SNIC_FUZZ_REQUIRE(synced_or_syn_received() || conn_->state() == TcpState::closed);
                if (synced_or_syn_received()) SNIC_FUZZ_REQUIRE(s.ack == rcv_nxt_wire());
                const std::uint8_t shift = s.has(flag::syn) ? 0 : info.rcv_wscale;
                SNIC_FUZZ_REQUIRE((std::uint64_t{s.window} << shift) <= cfg_.recv_window);
            }
        }
        // Between the least a peer or a path may impose (kMinSendMss with options) and ours.
        SNIC_FUZZ_REQUIRE(conn_->mss() + (info.timestamps ? 12u : 0u) >= kMinSendMss);
        SNIC_FUZZ_REQUIRE(conn_->mss() <= announce_);
    }

    // The in-order bytes placed since the last check are the peer's, at their places.
    void check_received() {
        const std::uint64_t got = conn_->received();
        SNIC_FUZZ_REQUIRE(got >= verified_);
        SNIC_FUZZ_REQUIRE(got <= posted_end_);
        for (const Buf& b : bufs_) {
            const std::uint64_t lo = std::max(b.start, verified_);
            const std::uint64_t hi = std::min(b.start + b.data.size(), got);
            for (std::uint64_t p = lo; p < hi; ++p)
                SNIC_FUZZ_REQUIRE(b.data[p - b.start] == peer_byte(stream_seq(p)));
        }
        verified_ = got;
    }

    Seq stream_seq(std::uint64_t pos) const { return conn_->irs() + 1 + static_cast<Seq>(pos); }

    // A buffer given back (or at the end): its first `n` bytes are the stream; after them,
    // a byte is the peer's for that place (out-of-order data) or untouched.
    void check_buffer(const Buf& b, std::size_t n, std::uint64_t received) {
        const bool synced = have_irs_;
        for (std::size_t i = 0; i < b.data.size(); ++i) {
            const std::uint64_t p = b.start + i;
            if (!synced) {
                SNIC_FUZZ_REQUIRE(b.data[i] == kFill);
                continue;
            }
            const Seq s = stream_seq(p);
            if (i < n || p < received) {
                SNIC_FUZZ_REQUIRE(b.data[i] == peer_byte(s));
            } else {
                SNIC_FUZZ_REQUIRE(b.data[i] == peer_byte(s) || b.data[i] == kFill);
            }
        }
    }

    void drain() {
        TcpEvent e;
        bool short_done = false;
        while (conn_->next_event(e)) {
            SNIC_FUZZ_REQUIRE(!terminal_);  // nothing after closed, reset or timed_out
            switch (e.kind) {
                case EventKind::connected:
                    SNIC_FUZZ_REQUIRE(!connected_);
                    connected_ = true;
                    break;
                case EventKind::readable:
                    SNIC_FUZZ_REQUIRE(e.bytes >= readable_ && e.bytes <= conn_->received());
                    readable_ = e.bytes;
                    break;
                case EventKind::recv_done: {
                    SNIC_FUZZ_REQUIRE(!bufs_.empty() && bufs_.front().cookie == e.cookie);
                    const Buf& b = bufs_.front();
                    const std::uint64_t got = conn_->received();
                    const std::uint64_t want =
                        got > b.start ? std::min<std::uint64_t>(b.data.size(), got - b.start) : 0;
                    SNIC_FUZZ_REQUIRE(e.bytes == want);
                    if (e.bytes < b.data.size()) short_done = true;
                    check_buffer(b, e.bytes, got);
                    bufs_.pop_front();
                    break;
                }
                case EventKind::send_space:
                    break;
                case EventKind::peer_closed:
                    SNIC_FUZZ_REQUIRE(!peer_fin_);
                    peer_fin_ = true;
                    break;
                case EventKind::closed:
                case EventKind::reset:
                case EventKind::timed_out:
                    terminal_ = true;
                    finished_ = true;
                    SNIC_FUZZ_REQUIRE(conn_->state() == TcpState::closed);
                    break;
            }
        }
        // A buffer completes short only when no more bytes can come.
        if (short_done) SNIC_FUZZ_REQUIRE(peer_fin_ || terminal_);
    }

    void check_views() {
        const TcpInfo i = conn_->info();
        SNIC_FUZZ_REQUIRE(i.unacked <= snd_max_);
        // Data queued and not acknowledged, of what the application gave; in flight, that
        // data and at most the SYN and the FIN.
        SNIC_FUZZ_REQUIRE(i.queued <= app_sent_ && i.unacked <= i.queued + 2);
        SNIC_FUZZ_REQUIRE(conn_->send_space() <= cfg_.send_buffer);
        if (i.unacked > 0) {
            SNIC_FUZZ_REQUIRE(conn_->sent_unacked(conn_->iss() + static_cast<Seq>(snd_una_now())));
            SNIC_FUZZ_REQUIRE(!conn_->sent_unacked(conn_->iss() + static_cast<Seq>(snd_max_)));
        }
        SNIC_FUZZ_REQUIRE(i.rcv_wnd <= cfg_.recv_window);
    }
    std::uint64_t snd_una_now() const { return snd_max_ - conn_->info().unacked; }

    // --- what the fuzzer does -------------------------------------------------------------

    void post(std::size_t n) {
        Buf b;
        b.data.assign(n, kFill);
        b.start = posted_end_;
        b.cookie = next_cookie_;
        const std::size_t outstanding = bufs_.size();
        bool ok = false;
        std::vector<std::uint8_t>& data = b.data;
        call([&] { ok = conn_->post_receive(std::as_writable_bytes(std::span(data)), b.cookie); });
        if (!ok) {
            SNIC_FUZZ_REQUIRE(outstanding >= cfg_.max_recv_buffers || peer_fin_ || terminal_);
            return;
        }
        SNIC_FUZZ_REQUIRE(outstanding < cfg_.max_recv_buffers);
        ++next_cookie_;
        posted_end_ += n;
        bufs_.push_back(std::move(b));
        poll_if_due();
    }

    void app_send(Input& in) {
        const std::uint8_t how = in.u8();
        const std::size_t n = how < 64    ? conn_->mss()
                              : how < 128 ? 1 + in.u8()
                                          : 1 + in.u16() % 4096;
        std::vector<std::uint8_t> rec(n);
        for (std::size_t i = 0; i < n; ++i) rec[i] = our_byte(1 + app_sent_ + i);
        const std::size_t space = conn_->send_space();
        const TcpState st = conn_->state();
        const bool open = st == TcpState::syn_sent || st == TcpState::syn_received ||
                          st == TcpState::established || st == TcpState::close_wait;
        bool ok = false;
        call([&] {
            ok = conn_->send(std::as_bytes(std::span(rec)));
            if (ok) app_sent_ += n;  // before the checks after the call
        });
        if (ok) {
            SNIC_FUZZ_REQUIRE(open && !fin_set_ && n <= space);
        } else if (open && !fin_set_ && n <= space) {
            SNIC_FUZZ_REQUIRE(false);  // it fitted the space offered
        }
        poll_if_due();
    }

    void advance(Input& in) {
        const std::uint8_t how = in.u8();
        const TcpTime d = conn_->next_deadline();
        if (how < 128 && d != kNever) {
            now_ = std::max(now_, d);
        } else if (how < 220) {
            now_ += TcpTime{in.u16()} * kMs;
        } else {
            now_ += TcpTime{in.u32()} * kSec;
        }
        call([&] { conn_->poll(now_); });
    }

    void control(Input& in) {
        const std::uint8_t how = in.u8();
        switch (how % 4) {
            case 0: {
                const TcpState st = conn_->state();
                if (!fin_set_ && (st == TcpState::syn_received || st == TcpState::established ||
                                  st == TcpState::close_wait)) {
                    fin_set_ = true;
                    fin_at_ = app_sent_;
                }
                call([&] { conn_->close(); });
                break;
            }
            case 1:
                if (how < 16) call([&] { conn_->abort(); });
                break;
            case 2: {
                const std::uint32_t mtu = in.u16();
                const std::uint32_t before = conn_->mss();
                bool lowered = false;
                call([&] { lowered = conn_->on_path_mtu(mtu, now_); });
                SNIC_FUZZ_REQUIRE(lowered ? conn_->mss() < before : conn_->mss() == before);
                break;
            }
            case 3:
                if (!opened_ && conn_->state() == TcpState::closed && !finished_) {
                    opened_ = true;
                    call([&] { conn_->open_active(now_); });
                }
                break;
        }
        poll_if_due();
    }

    // The peer's next sequence number as it would send it, or near it.
    Seq pick_seq(Input& in, std::uint8_t mode, bool syn) {
        const Seq base = synced_or_syn_received() ? rcv_nxt_wire() : peer_iss_;
        if (syn && mode == 0) return peer_iss_;
        switch (mode) {
            case 0:
                return base + static_cast<Seq>(static_cast<std::int8_t>(in.u8()));
            case 1:
                return base + in.u16();
            case 2:
                return in.u32();
            default:
                return base - in.u8();
        }
    }
    Seq pick_ack(Input& in, std::uint8_t mode) {
        const Seq iss = conn_->iss();
        const std::uint64_t una = snd_una_now();
        switch (mode) {
            case 0:
                return iss + static_cast<Seq>(snd_max_);
            case 1:
                return iss + static_cast<Seq>(una) +
                       static_cast<Seq>(static_cast<std::int8_t>(in.u8()));
            case 2:
                return in.u32();
            default:
                return iss + static_cast<Seq>(una + in.u16() % (snd_max_ - una + 1));
        }
    }

    void fill_payload(std::span<std::uint8_t> p, Seq first) {
        for (std::size_t i = 0; i < p.size(); ++i) p[i] = peer_byte(first + static_cast<Seq>(i));
    }

    std::size_t pick_len(Input& in) {
        const std::uint8_t how = in.u8();
        if (how < 96) return 0;
        if (how < 160) return in.u8();
        if (how < 200) return conn_->mss();
        return in.u16() % 4096;
    }

    void built_segment(Input& in) {
        const std::uint8_t sel = in.u8();
        SegmentSpec s;
        s.src_port = cfg_.remote.port;
        s.dst_port = cfg_.local.port;
        s.flags = in.u8();
        if (sel & 1) s.flags |= flag::ack;
        if (sel & 2) s.flags &= static_cast<std::uint8_t>(~(flag::syn | flag::rst | flag::fin));
        const bool syn = (s.flags & flag::syn) != 0;
        s.seq = pick_seq(in, (sel >> 2) & 3, syn);
        s.ack = pick_ack(in, (sel >> 4) & 3);
        s.window = (sel & 64) ? in.u16() : 65535;
        s.urgent = (sel & 128) ? in.u16() : 0;
        const std::uint8_t ob = in.u8();
        TcpOptions& o = s.opts;
        if (ob & 1) {
            o.has_mss = true;
            o.mss = (ob & 0x80) ? in.u16() : 1460;
        }
        if (ob & 2) {
            o.has_wscale = true;
            o.wscale = in.u8() % 16;
        }
        o.sack_permitted = (ob & 4) != 0;
        if (ob & 8) {
            o.has_timestamps = true;
            peer_ts_ += in.u8();
            o.ts_val = (ob & 0x40) ? in.u32() : peer_ts_;
            o.ts_ecr = in.u32();
        }
        if (ob & 16) {
            o.nsack = static_cast<std::uint8_t>(1 + in.u8() % kMaxSackBlocks);
            const std::uint64_t una = snd_una_now();
            for (std::size_t i = 0; i < o.nsack; ++i) {
                const Seq l =
                    conn_->iss() + static_cast<Seq>(una + in.u16() % (snd_max_ - una + 1));
                o.sack[i] = SackBlock{l, l + in.u16() % 4096};
            }
            while (o.nsack > 0 && header_length(s) > kTcpMaxHdrLen) --o.nsack;
        }
        const std::size_t len = pick_len(in);
        std::vector<std::uint8_t> bytes(header_length(s) + len);
        std::vector<std::uint8_t> payload(len);
        fill_payload(payload, s.seq + (syn ? 1 : 0));
        const std::uint32_t pseudo =
            pseudo_sum(cfg_.remote.addr, cfg_.local.addr, static_cast<std::uint32_t>(bytes.size()));
        SNIC_FUZZ_REQUIRE(write_segment(bytes, s, payload, {}, pseudo) == bytes.size());
        if (ob & 32) {
            // One corrupt byte: the checksum (or the header's own checks) catches it.
            const std::uint8_t x = in.u8();
            bytes[in.u16() % bytes.size()] ^= x == 0 ? 1 : x;
            Segment bad;
            SNIC_FUZZ_REQUIRE(parse_segment(bytes, pseudo, bad) != ParseError::none);
            return;
        }
        Segment seg;
        SNIC_FUZZ_REQUIRE(parse_segment(bytes, pseudo, seg) == ParseError::none);
        check_parsed(bytes, seg);
        // The builder and the parser agree on every field.
        SNIC_FUZZ_REQUIRE(seg.src_port == s.src_port && seg.dst_port == s.dst_port);
        SNIC_FUZZ_REQUIRE(seg.seq == s.seq && seg.ack == s.ack && seg.flags == s.flags);
        SNIC_FUZZ_REQUIRE(seg.window == s.window && seg.urgent == s.urgent);
        SNIC_FUZZ_REQUIRE(seg.header_length == header_length(s));
        SNIC_FUZZ_REQUIRE(seg.opts.has_mss == o.has_mss && (!o.has_mss || seg.opts.mss == o.mss));
        SNIC_FUZZ_REQUIRE(seg.opts.has_wscale == o.has_wscale &&
                          (!o.has_wscale || seg.opts.wscale == o.wscale));
        SNIC_FUZZ_REQUIRE(seg.opts.sack_permitted == o.sack_permitted);
        SNIC_FUZZ_REQUIRE(seg.opts.has_timestamps == o.has_timestamps);
        if (o.has_timestamps)
            SNIC_FUZZ_REQUIRE(seg.opts.ts_val == o.ts_val && seg.opts.ts_ecr == o.ts_ecr);
        SNIC_FUZZ_REQUIRE(seg.opts.nsack == o.nsack);
        for (std::size_t i = 0; i < o.nsack; ++i) SNIC_FUZZ_REQUIRE(seg.opts.sack[i] == o.sack[i]);
        SNIC_FUZZ_REQUIRE(
            std::equal(seg.payload.begin(), seg.payload.end(), payload.begin(), payload.end()));
        deliver(seg);
    }

    // A header and options as the input has them (ports aside), our payload after them.
    void raw_header_segment(Input& in) {
        const std::uint8_t how = in.u8();
        const std::size_t hlen = kTcpMinHdrLen + 4 * (how % 11);
        const std::span<const std::uint8_t> raw = in.bytes(hlen);
        const std::size_t len = pick_len(in);
        std::vector<std::uint8_t> bytes(hlen + len, 0);
        std::copy(raw.begin(), raw.end(), bytes.begin());
        store16(&bytes[0], cfg_.remote.port);
        store16(&bytes[2], cfg_.local.port);
        if (how & 0x80) bytes[12] = static_cast<std::uint8_t>((hlen / 4) << 4 | (bytes[12] & 15));
        if (how & 0x40) {  // a sequence number near RCV.NXT
            const Seq s = pick_seq(in, 0, false);
            store32(&bytes[4], s);
        }
        const Seq seq = load32(&bytes[4]);
        fill_payload(std::span(bytes).subspan(hlen), seq + ((bytes[13] & flag::syn) ? 1 : 0));
        const std::uint32_t pseudo =
            pseudo_sum(cfg_.remote.addr, cfg_.local.addr, static_cast<std::uint32_t>(bytes.size()));
        const bool good_sum = (how & 0x20) == 0;
        if (good_sum) {
            bytes[16] = bytes[17] = 0;
            const std::uint16_t c = net::csum_finish(net::csum_add(bytes, pseudo));
            store16(&bytes[16], c);
        }
        Segment seg;
        const ParseError e = parse_segment(bytes, pseudo, seg);
        if (good_sum) SNIC_FUZZ_REQUIRE(e != ParseError::bad_checksum);
        if (e != ParseError::none) return;
        check_parsed(bytes, seg);
        SNIC_FUZZ_REQUIRE(net::csum_ok(bytes, pseudo));
        if (seg.header_length != hlen) return;  // the payload would not be the peer's stream
        deliver(seg);
    }

    // Any bytes to the parser alone.
    void parse_only(Input& in) {
        const std::uint8_t how = in.u8();
        const std::uint32_t pseudo = in.u32();
        const std::span<const std::uint8_t> raw = in.bytes(in.u8());
        Segment seg;
        const ParseError e = parse_segment(raw, pseudo, seg, (how & 1) != 0);
        if (e == ParseError::none) check_parsed(raw, seg);
        SNIC_FUZZ_REQUIRE(!parse_error_name(e).empty() && parse_error_name(e) != "?");
    }

    void deliver(const Segment& seg) {
        if (open_mode_ != 0 && !opened_ && conn_->state() == TcpState::closed && !finished_) {
            const bool want = seg.has(flag::syn) && !seg.has(flag::ack) && !seg.has(flag::rst);
            if (open_mode_ == 1 || open_mode_ == 2) {
                bool ok = false;
                call([&] { ok = conn_->open_passive(seg, now_); });
                SNIC_FUZZ_REQUIRE(ok == want);
                if (ok) {
                    opened_ = true;
                    SNIC_FUZZ_REQUIRE(conn_->irs() == seg.seq);
                    SNIC_FUZZ_REQUIRE(conn_->state() == TcpState::syn_received);
                }
                poll_if_due();
                if (ok || open_mode_ == 2) return;
            }
        }
        call([&] { conn_->on_segment(seg, now_); });
        poll_if_due();
    }

    TcpConfig cfg_;
    bool v6_ = false;
    std::uint32_t announce_ = 0;
    std::uint8_t open_mode_ = 0;  // 0 active, 1-2 passive (from a SYN), 3 never opened
    bool opened_ = false;
    Wire wire_;
    std::unique_ptr<TcpConnection> conn_;
    TcpTime now_ = 10 * kSec;

    // Our side: bytes queued, the FIN, what was sent (offsets from the ISS).
    std::uint64_t app_sent_ = 0;
    bool fin_set_ = false;
    std::uint64_t fin_at_ = 0;
    std::uint64_t snd_max_ = 0;
    std::uint64_t snd_una_ = 0, snd_wnd_ = 0;  // before the current call

    // The peer's side and the application's buffers.
    Seq peer_iss_ = 0;
    std::uint32_t peer_ts_ = 1000;
    std::deque<Buf> bufs_;
    std::uint64_t posted_end_ = 0;
    std::uint64_t next_cookie_ = 1;
    std::uint64_t verified_ = 0;
    std::uint64_t readable_ = 0;
    bool have_irs_ = false;  // the connection took the peer's SYN (irs() holds)
    bool connected_ = false, peer_fin_ = false, terminal_ = false, finished_ = false;
};

}  // namespace
}  // namespace snic::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    snic::fuzz::Input in(data, size);
    snic::fuzz::TcpDriver d(in);
    d.run(in);
    return 0;
}
