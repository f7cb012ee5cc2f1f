// DDP/RDMAP parse and build: loops over kOpTable (ddp.h) plus the bodies of the few opcodes
// that have one.
#include "proto/iwarp/ddp.h"

#include <cstring>

namespace snic::iwarp {

namespace {

template <typename T>
const T& at(std::span<const std::uint8_t> b, std::size_t off) {
    return *reinterpret_cast<const T*>(b.data() + off);
}
template <typename T>
T& at(std::span<std::uint8_t> b, std::size_t off) {
    return *reinterpret_cast<T*>(b.data() + off);
}

// The terminated-header part of a Terminate body (after its 4-byte control), or false when
// the Hdrct bits promise more than there is.
bool parse_terminate(std::span<const std::uint8_t> body, Terminate& t) {
    const std::uint32_t ctl = at<net::Be32>(body, 0).host();
    t.cause.layer = static_cast<TermLayer>(ctl >> 28);
    t.cause.etype = static_cast<std::uint8_t>((ctl >> 24) & 0xf);
    t.cause.code = static_cast<std::uint8_t>(ctl >> 16);
    t.m = (ctl & kTermFlagM) != 0;
    t.d = (ctl & kTermFlagD) != 0;
    t.r = (ctl & kTermFlagR) != 0;
    std::size_t off = kTerminateControlLen;
    if (t.d) {
        if (body.size() < off + 3) return false;
        t.ddp_seg_len = at<net::Be16>(body, off).host();
        off += 2;
        const std::size_t hl =
            (body[off] & kDdpTagged) != 0 ? kTaggedHeaderLen : kUntaggedHeaderLen;
        if (body.size() < off + hl) return false;
        t.ddp_header = body.subspan(off, hl);
        off += hl;
    }
    if (t.r) {
        if (body.size() < off + kTerminatedRdmapLen) return false;
        t.rdmap_header = body.subspan(off, kTerminatedRdmapLen);
        off += kTerminatedRdmapLen;
    }
    return off == body.size();
}

}  // namespace

std::string_view term_cause_name(const TermCause& c) {
    switch (c.layer) {
        case TermLayer::rdmap:
            switch (static_cast<RdmapCode>(c.code)) {
                case RdmapCode::invalid_stag:
                    return "rdmap/invalid_stag";
                case RdmapCode::base_or_bounds:
                    return "rdmap/base_or_bounds";
                case RdmapCode::access_rights:
                    return "rdmap/access_rights";
                case RdmapCode::stag_not_associated:
                    return "rdmap/stag_not_associated";
                case RdmapCode::to_wrap:
                    return "rdmap/to_wrap";
                case RdmapCode::invalid_version:
                    return "rdmap/invalid_version";
                case RdmapCode::unexpected_opcode:
                    return "rdmap/unexpected_opcode";
                case RdmapCode::catastrophic_stream:
                    return "rdmap/catastrophic_stream";
                case RdmapCode::catastrophic_global:
                    return "rdmap/catastrophic_global";
                case RdmapCode::cannot_invalidate:
                    return "rdmap/cannot_invalidate";
                case RdmapCode::unspecified:
                    return "rdmap/unspecified";
            }
            return "rdmap/reserved";
        case TermLayer::ddp:
            if (c.etype == static_cast<std::uint8_t>(DdpEtype::tagged)) {
                switch (static_cast<DdpTaggedCode>(c.code)) {
                    case DdpTaggedCode::invalid_stag:
                        return "ddp_tagged/invalid_stag";
                    case DdpTaggedCode::base_or_bounds:
                        return "ddp_tagged/base_or_bounds";
                    case DdpTaggedCode::stag_not_associated:
                        return "ddp_tagged/stag_not_associated";
                    case DdpTaggedCode::to_wrap:
                        return "ddp_tagged/to_wrap";
                    case DdpTaggedCode::invalid_version:
                        return "ddp_tagged/invalid_version";
                }
                return "ddp_tagged/reserved";
            }
            if (c.etype == static_cast<std::uint8_t>(DdpEtype::untagged)) {
                switch (static_cast<DdpUntaggedCode>(c.code)) {
                    case DdpUntaggedCode::invalid_qn:
                        return "ddp_untagged/invalid_qn";
                    case DdpUntaggedCode::no_buffer:
                        return "ddp_untagged/no_buffer";
                    case DdpUntaggedCode::msn_range:
                        return "ddp_untagged/msn_range";
                    case DdpUntaggedCode::invalid_mo:
                        return "ddp_untagged/invalid_mo";
                    case DdpUntaggedCode::too_long:
                        return "ddp_untagged/too_long";
                    case DdpUntaggedCode::invalid_version:
                        return "ddp_untagged/invalid_version";
                }
                return "ddp_untagged/reserved";
            }
            return "ddp/catastrophic";
        case TermLayer::llp:
            switch (static_cast<LlpCode>(c.code)) {
                case LlpCode::stream_lost:
                    return "llp/stream_lost";
                case LlpCode::crc_error:
                    return "llp/crc_error";
                case LlpCode::marker_mismatch:
                    return "llp/marker_mismatch";
                case LlpCode::invalid_request_reply:
                    return "llp/invalid_request_reply";
                case LlpCode::local_catastrophic:
                    return "llp/local_catastrophic";
                case LlpCode::insufficient_ird:
                    return "llp/insufficient_ird";
                case LlpCode::no_matching_rtr:
                    return "llp/no_matching_rtr";
            }
            return "llp/reserved";
    }
    return "reserved";
}

TermCause parse_error_cause(ParseError e, bool tagged) {
    switch (e) {
        case ParseError::bad_ddp_version:
            return tagged ? term_cause(DdpTaggedCode::invalid_version)
                          : term_cause(DdpUntaggedCode::invalid_version);
        case ParseError::bad_rdmap_version:
            return term_cause(RdmapEtype::remote_operation, RdmapCode::invalid_version);
        case ParseError::bad_opcode:
        case ParseError::tagged_mismatch:
            return term_cause(RdmapEtype::remote_operation, RdmapCode::unexpected_opcode);
        case ParseError::bad_qn:
            return term_cause(DdpUntaggedCode::invalid_qn);
        case ParseError::ok:
        case ParseError::too_short:
        case ParseError::not_last:
        case ParseError::bad_length:
        case ParseError::bad_terminate:
            break;
    }
    return term_cause(RdmapEtype::remote_operation, RdmapCode::catastrophic_stream);
}

Segment parse(std::span<const std::uint8_t> b) {
    Segment s;
    if (b.size() < 2) return s;
    const std::uint8_t ddp = b[0], rdmap = b[1];
    s.tagged = (ddp & kDdpTagged) != 0;
    s.last = (ddp & kDdpLast) != 0;
    s.op = static_cast<RdmapOp>(rdmap & kRdmapOpcodeMask);
    const std::size_t hl = s.tagged ? kTaggedHeaderLen : kUntaggedHeaderLen;
    if (b.size() < hl) return s;
    // Reserved bits are ignored on receipt (RFC 5041 §4, RFC 5040 §4.3).
    if ((ddp & kDdpVersionMask) != kDdpVersion) {
        s.error = ParseError::bad_ddp_version;
        return s;
    }
    if ((rdmap >> kRdmapVersionShift) != kRdmapVersion) {
        s.error = ParseError::bad_rdmap_version;
        return s;
    }
    const OpInfo& info = s.info();
    if (!info.valid) {
        s.error = ParseError::bad_opcode;
        return s;
    }
    if (info.tagged != s.tagged) {
        s.error = ParseError::tagged_mismatch;
        return s;
    }
    if (s.tagged) {
        const auto& h = at<TaggedHeader>(b, 0);
        s.stag = h.stag.host();
        s.to = h.to.host();
    } else {
        const auto& h = at<UntaggedHeader>(b, 0);
        s.inv_stag = h.inv_stag.host();
        s.qn = h.qn.host();
        s.msn = h.msn.host();
        s.mo = h.mo.host();
        if (s.qn != static_cast<std::uint32_t>(info.qn)) {
            s.error = ParseError::bad_qn;
            return s;
        }
    }
    if (b.size() < hl + info.body_len) return s;  // too_short
    const std::span<const std::uint8_t> body = b.subspan(hl);
    if (info.fixed) {
        if (!s.last) {
            s.error = ParseError::not_last;
            return s;
        }
        if (body.size() != info.body_len) {
            s.error = ParseError::bad_length;
            return s;
        }
    }
    switch (s.op) {
        case RdmapOp::read_request: {
            const auto& r = at<ReadRequestBody>(body, 0);
            s.read = {r.sink_stag.host(), r.sink_to.host(), r.size.host(), r.src_stag.host(),
                      r.src_to.host()};
            break;
        }
        case RdmapOp::atomic_request: {
            const auto& a = at<AtomicRequestBody>(body, 0);
            s.atomic.op = static_cast<AtomicOp>(a.aopcode.host() & 0xf);
            s.atomic.request_id = a.request_id.host();
            s.atomic.stag = a.stag.host();
            s.atomic.to = a.to.host();
            s.atomic.swap_add = a.swap_add.host();
            s.atomic.swap_add_mask = a.swap_add_mask.host();
            s.atomic.compare = a.compare.host();
            s.atomic.compare_mask = a.compare_mask.host();
            break;
        }
        case RdmapOp::atomic_response: {
            const auto& a = at<AtomicResponseBody>(body, 0);
            s.atomic_resp = {a.request_id.host(), a.orig.host()};
            break;
        }
        case RdmapOp::immediate:
        case RdmapOp::immediate_se:
            std::memcpy(s.immediate.data(), body.data(), kImmediateLen);
            break;
        case RdmapOp::terminate:
            if (!s.last) {
                s.error = ParseError::not_last;
                return s;
            }
            if (!parse_terminate(body, s.term)) {
                s.error = ParseError::bad_terminate;
                return s;
            }
            break;
        default:
            break;
    }
    s.header = info.payload ? b.first(hl) : b;
    s.payload = info.payload ? body : std::span<const std::uint8_t>{};
    s.error = ParseError::ok;
    return s;
}

std::size_t built_header_len(const SegmentSpec& spec) {
    const OpInfo& info = op_info(spec.op);
    std::size_t n = header_len(spec.op) + info.body_len;
    if (spec.op == RdmapOp::terminate) {
        if (!spec.term_ddp_header.empty()) n += 2 + spec.term_ddp_header.size();
        n += spec.term_rdmap_header.size();
    }
    return n;
}

std::size_t build_header(std::span<std::uint8_t> out, const SegmentSpec& spec) {
    const OpInfo& info = op_info(spec.op);
    const std::size_t n = built_header_len(spec);
    if (!info.valid || out.size() < n) return 0;
    const std::uint8_t ddp = static_cast<std::uint8_t>(
        (info.tagged ? kDdpTagged : 0) | (spec.last || info.fixed ? kDdpLast : 0) | kDdpVersion);
    const std::uint8_t rdmap = static_cast<std::uint8_t>((kRdmapVersion << kRdmapVersionShift) |
                                                         static_cast<std::uint8_t>(spec.op));
    if (info.tagged) {
        auto& h = at<TaggedHeader>(out, 0);
        h.ddp_ctrl = ddp;
        h.rdmap_ctrl = rdmap;
        h.stag = spec.stag;
        h.to = spec.to;
    } else {
        auto& h = at<UntaggedHeader>(out, 0);
        h.ddp_ctrl = ddp;
        h.rdmap_ctrl = rdmap;
        h.inv_stag = info.invalidate ? spec.inv_stag : 0;
        h.qn = static_cast<std::uint32_t>(info.qn);
        h.msn = spec.msn;
        h.mo = spec.mo;
    }
    const std::span<std::uint8_t> body = out.subspan(header_len(spec.op));
    switch (spec.op) {
        case RdmapOp::read_request: {
            auto& r = at<ReadRequestBody>(body, 0);
            r.sink_stag = spec.read.sink_stag;
            r.sink_to = spec.read.sink_to;
            r.size = spec.read.size;
            r.src_stag = spec.read.src_stag;
            r.src_to = spec.read.src_to;
            break;
        }
        case RdmapOp::atomic_request: {
            auto& a = at<AtomicRequestBody>(body, 0);
            a.aopcode = static_cast<std::uint32_t>(spec.atomic.op);
            a.request_id = spec.atomic.request_id;
            a.stag = spec.atomic.stag;
            a.to = spec.atomic.to;
            a.swap_add = spec.atomic.swap_add;
            a.swap_add_mask = spec.atomic.swap_add_mask;
            a.compare = spec.atomic.compare;
            a.compare_mask = spec.atomic.compare_mask;
            break;
        }
        case RdmapOp::atomic_response: {
            auto& a = at<AtomicResponseBody>(body, 0);
            a.request_id = spec.atomic_resp.request_id;
            a.orig = spec.atomic_resp.orig;
            break;
        }
        case RdmapOp::immediate:
        case RdmapOp::immediate_se:
            std::memcpy(body.data(), spec.immediate.data(), kImmediateLen);
            break;
        case RdmapOp::terminate: {
            const auto& dh = spec.term_ddp_header;
            const auto& rh = spec.term_rdmap_header;
            if (!dh.empty() && dh.size() != kTaggedHeaderLen && dh.size() != kUntaggedHeaderLen)
                return 0;
            if (!rh.empty() && rh.size() != kTerminatedRdmapLen) return 0;
            std::uint32_t ctl = (static_cast<std::uint32_t>(spec.cause.layer) << 28) |
                                (std::uint32_t{spec.cause.etype & 0xfu} << 24) |
                                (std::uint32_t{spec.cause.code} << 16);
            if (!dh.empty()) ctl |= kTermFlagD | (spec.term_seg_len_valid ? kTermFlagM : 0);
            if (!rh.empty()) ctl |= kTermFlagR;
            at<net::Be32>(body, 0) = ctl;
            std::size_t off = kTerminateControlLen;
            if (!dh.empty()) {
                at<net::Be16>(body, off) = spec.term_ddp_seg_len;
                off += 2;
                std::memcpy(body.data() + off, dh.data(), dh.size());
                off += dh.size();
            }
            if (!rh.empty()) std::memcpy(body.data() + off, rh.data(), rh.size());
            break;
        }
        default:
            break;
    }
    return n;
}

}  // namespace snic::iwarp
