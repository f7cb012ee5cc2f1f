// TCP header and options: parse, build, checksum.
#include "proto/tcp/segment.h"

#include <cstring>

#include "proto/net/checksum.h"

namespace snic::tcp {

namespace {

constexpr std::uint8_t kTcpProto = 6;

std::uint32_t load32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}
void store32(std::uint8_t* p, std::uint32_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 24);
    p[1] = static_cast<std::uint8_t>(v >> 16);
    p[2] = static_cast<std::uint8_t>(v >> 8);
    p[3] = static_cast<std::uint8_t>(v);
}

constexpr const OptInfo* opt_info(std::uint8_t kind) {
    for (const OptInfo& i : kOptTable)
        if (static_cast<std::uint8_t>(i.kind) == kind) return &i;
    return nullptr;
}

// One option's body (after kind and length) into `o`; false when its length is wrong.
bool take_option(std::uint8_t kind, const std::uint8_t* v, std::size_t len, TcpOptions& o) {
    const OptInfo* info = opt_info(kind);
    if (info == nullptr) return true;  // unknown options are skipped (RFC 9293 §3.1)
    if (info->length != 0 && len + 2 != info->length) return false;
    switch (info->kind) {
        case OptKind::mss:
            o.has_mss = true;
            o.mss = static_cast<std::uint16_t>(v[0] << 8 | v[1]);
            break;
        case OptKind::wscale:
            o.has_wscale = true;
            o.wscale = v[0];
            break;
        case OptKind::sack_permitted:
            o.sack_permitted = true;
            break;
        case OptKind::timestamps:
            o.has_timestamps = true;
            o.ts_val = load32(v);
            o.ts_ecr = load32(v + 4);
            break;
        case OptKind::sack:
            if (len == 0 || len % 8 != 0 || len / 8 > kMaxSackBlocks) return false;
            o.nsack = static_cast<std::uint8_t>(len / 8);
            for (std::size_t i = 0; i < o.nsack; ++i)
                o.sack[i] = SackBlock{load32(v + 8 * i), load32(v + 8 * i + 4)};
            break;
        default:
            break;
    }
    return true;
}

}  // namespace

std::uint32_t pseudo_sum(const IpAddr& src, const IpAddr& dst, std::uint32_t tcp_length) {
    if (src.is_v4() && dst.is_v4()) {
        std::uint32_t sum = net::csum_add(std::span(src.bytes).subspan(12));
        sum = net::csum_add(std::span(dst.bytes).subspan(12), sum);
        return sum + kTcpProto + tcp_length;
    }
    std::uint32_t sum = net::csum_add(src.bytes);
    sum = net::csum_add(dst.bytes, sum);
    return sum + (tcp_length >> 16) + (tcp_length & 0xffff) + kTcpProto;
}

std::size_t options_length(const TcpOptions& o) {
    std::size_t n = 0;
    if (o.has_mss) n += 4;
    if (o.has_timestamps) {
        n += 12;  // SACK-permitted (or NOP NOP) and timestamps
    } else if (o.sack_permitted) {
        n += 4;  // NOP NOP SACK-permitted
    }
    if (o.has_wscale) n += 4;
    if (o.nsack > 0) n += 4 + 8 * std::size_t{o.nsack};
    return n;
}

std::string_view parse_error_name(ParseError e) {
    switch (e) {
        case ParseError::none:
            return "none";
        case ParseError::too_short:
            return "too_short";
        case ParseError::bad_offset:
            return "bad_offset";
        case ParseError::bad_checksum:
            return "bad_checksum";
        case ParseError::bad_option:
            return "bad_option";
    }
    return "?";
}

ParseError parse_segment(std::span<const std::uint8_t> bytes, std::uint32_t pseudo, Segment& out,
                         bool verify_checksum) {
    if (bytes.size() < kTcpMinHdrLen) return ParseError::too_short;
    const auto& h = *reinterpret_cast<const TcpHdr*>(bytes.data());
    const std::size_t hlen = static_cast<std::size_t>(h.data_offset >> 4) * 4;
    if (hlen < kTcpMinHdrLen || hlen > bytes.size()) return ParseError::bad_offset;
    if (verify_checksum && !net::csum_ok(bytes, pseudo)) return ParseError::bad_checksum;
    out = Segment{};
    out.src_port = h.src_port.host();
    out.dst_port = h.dst_port.host();
    out.seq = h.seq.host();
    out.ack = h.ack.host();
    out.flags = h.flags;
    out.window = h.window.host();
    out.checksum = h.checksum.host();
    out.urgent = h.urgent.host();
    out.header_length = static_cast<std::uint8_t>(hlen);
    out.payload = bytes.subspan(hlen);
    std::size_t i = kTcpMinHdrLen;
    while (i < hlen) {
        const std::uint8_t kind = bytes[i];
        if (kind == static_cast<std::uint8_t>(OptKind::eol)) break;
        if (kind == static_cast<std::uint8_t>(OptKind::nop)) {
            ++i;
            continue;
        }
        if (i + 1 >= hlen) return ParseError::bad_option;
        const std::size_t len = bytes[i + 1];
        if (len < 2 || i + len > hlen) return ParseError::bad_option;
        if (!take_option(kind, bytes.data() + i + 2, len - 2, out.opts)) {
            return ParseError::bad_option;
        }
        i += len;
    }
    return ParseError::none;
}

std::size_t write_segment(std::span<std::uint8_t> out, const SegmentSpec& s,
                          std::span<const std::uint8_t> a, std::span<const std::uint8_t> b,
                          std::uint32_t pseudo, bool partial) {
    const std::size_t hlen = header_length(s);
    const std::size_t total = hlen + a.size() + b.size();
    auto& h = *reinterpret_cast<TcpHdr*>(out.data());
    h.src_port = s.src_port;
    h.dst_port = s.dst_port;
    h.seq = s.seq;
    h.ack = s.ack;
    h.data_offset = static_cast<std::uint8_t>((hlen / 4) << 4);
    h.flags = s.flags;
    h.window = s.window;
    h.checksum = 0;
    h.urgent = s.urgent;
    std::uint8_t* p = out.data() + kTcpMinHdrLen;
    const TcpOptions& o = s.opts;
    if (o.has_mss) {
        *p++ = static_cast<std::uint8_t>(OptKind::mss);
        *p++ = 4;
        *p++ = static_cast<std::uint8_t>(o.mss >> 8);
        *p++ = static_cast<std::uint8_t>(o.mss);
    }
    if (o.has_timestamps) {
        if (o.sack_permitted) {
            *p++ = static_cast<std::uint8_t>(OptKind::sack_permitted);
            *p++ = 2;
        } else {
            *p++ = static_cast<std::uint8_t>(OptKind::nop);
            *p++ = static_cast<std::uint8_t>(OptKind::nop);
        }
        *p++ = static_cast<std::uint8_t>(OptKind::timestamps);
        *p++ = 10;
        store32(p, o.ts_val);
        store32(p + 4, o.ts_ecr);
        p += 8;
    } else if (o.sack_permitted) {
        *p++ = static_cast<std::uint8_t>(OptKind::nop);
        *p++ = static_cast<std::uint8_t>(OptKind::nop);
        *p++ = static_cast<std::uint8_t>(OptKind::sack_permitted);
        *p++ = 2;
    }
    if (o.has_wscale) {
        *p++ = static_cast<std::uint8_t>(OptKind::nop);
        *p++ = static_cast<std::uint8_t>(OptKind::wscale);
        *p++ = 3;
        *p++ = o.wscale;
    }
    if (o.nsack > 0) {
        *p++ = static_cast<std::uint8_t>(OptKind::nop);
        *p++ = static_cast<std::uint8_t>(OptKind::nop);
        *p++ = static_cast<std::uint8_t>(OptKind::sack);
        *p++ = static_cast<std::uint8_t>(2 + 8 * o.nsack);
        for (std::size_t i = 0; i < o.nsack; ++i) {
            store32(p, o.sack[i].left);
            store32(p + 4, o.sack[i].right);
            p += 8;
        }
    }
    if (partial) {
        if (!a.empty()) std::memcpy(out.data() + hlen, a.data(), a.size());
        if (!b.empty()) std::memcpy(out.data() + hlen + a.size(), b.data(), b.size());
        h.checksum = net::csum_fold(pseudo);
        return total;
    }
    // The payload is summed as it is copied (two pieces when it wraps in the send buffer;
    // a first piece of odd length would shift the second's words: then copy, then sum).
    std::uint32_t sum = net::csum_add(out.first(hlen), pseudo);
    if (a.size() % 2 == 0) {
        sum = net::csum_copy(out.data() + hlen, a, sum);
        sum = net::csum_copy(out.data() + hlen + a.size(), b, sum);
    } else {
        std::memcpy(out.data() + hlen, a.data(), a.size());
        if (!b.empty()) std::memcpy(out.data() + hlen + a.size(), b.data(), b.size());
        sum = net::csum_add(out.subspan(hlen, total - hlen), sum);
    }
    h.checksum = net::csum_finish(sum);
    return total;
}

bool reset_for(const Segment& in, SegmentSpec& out) {
    if (in.has(flag::rst)) return false;
    out = SegmentSpec{};
    out.src_port = in.dst_port;
    out.dst_port = in.src_port;
    if (in.has(flag::ack)) {
        out.seq = in.ack;
        out.flags = flag::rst;
    } else {
        out.seq = 0;
        out.ack = in.seq + in.seq_len();
        out.flags = flag::rst | flag::ack;
    }
    return true;
}

}  // namespace snic::tcp
