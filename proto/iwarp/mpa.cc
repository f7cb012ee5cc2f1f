// MPA frames, negotiation and FPDU framing (mpa.h).
#include "proto/iwarp/mpa.h"

#include <algorithm>
#include <cstring>

#include "proto/crc/crc.h"
#include "proto/verbs/place.h"

namespace snic::iwarp {
namespace {

std::uint16_t load_be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

void store_be16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}

// The CRC travels least significant byte first (as iSCSI's digest; see
// tests/unit/crc/test_mpa_captures.cc against siw's traffic).
std::uint32_t load_crc(const std::uint8_t* p) {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
}

void store_crc(std::uint8_t* p, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::string_view key_of(FrameKind kind) {
    return kind == FrameKind::request ? kMpaRequestKey : kMpaReplyKey;
}

bool valid_revision(std::uint8_t rev) {
    return rev == 1 || rev == 2;
}

// The RTR kind a set holds, by siw's preference: Write, then Read, then Send.
Rtr first_rtr(std::uint8_t set) {
    if ((set & kRtrWrite) != 0) return Rtr::write;
    if ((set & kRtrRead) != 0) return Rtr::read;
    if ((set & kRtrSend) != 0) return Rtr::send;
    return Rtr::none;
}

std::uint8_t rtr_bit(Rtr r) {
    switch (r) {
        case Rtr::send:
            return kRtrSend;
        case Rtr::write:
            return kRtrWrite;
        case Rtr::read:
            return kRtrRead;
        case Rtr::none:
            break;
    }
    return 0;
}

}  // namespace

// --- frames ------------------------------------------------------------------------------

void write_ird_ord(std::span<std::uint8_t, kMpaIrdOrdLen> out, const IrdOrd& v) noexcept {
    std::uint16_t words[2] = {static_cast<std::uint16_t>(v.ird & kMpaIrdOrdMax),
                              static_cast<std::uint16_t>(v.ord & kMpaIrdOrdMax)};
    if (v.peer_to_peer) words[kIrdOrdP2p.in_ord_word] |= kIrdOrdP2p.mask;
    for (const IrdOrdBit& b : kIrdOrdRtrBits) {
        if ((v.rtr & b.rtr) != 0) words[b.in_ord_word] |= b.mask;
    }
    store_be16(out.data(), words[0]);
    store_be16(out.data() + 2, words[1]);
}

IrdOrd read_ird_ord(std::span<const std::uint8_t, kMpaIrdOrdLen> in) noexcept {
    const std::uint16_t words[2] = {load_be16(in.data()), load_be16(in.data() + 2)};
    IrdOrd v;
    v.ird = words[0] & kMpaIrdOrdMax;
    v.ord = words[1] & kMpaIrdOrdMax;
    v.peer_to_peer = (words[kIrdOrdP2p.in_ord_word] & kIrdOrdP2p.mask) != 0;
    for (const IrdOrdBit& b : kIrdOrdRtrBits) {
        if ((words[b.in_ord_word] & b.mask) != 0) v.rtr |= b.rtr;
    }
    return v;
}

MpaDecoded decode_frame(std::span<const std::uint8_t> bytes, FrameKind kind) noexcept {
    MpaDecoded d;
    const std::string_view key = key_of(kind);
    const std::size_t seen = std::min(bytes.size(), kMpaKeyLen);
    // (seen > 0: an empty span may have no address, and memcmp wants one.)
    if (seen > 0 && std::memcmp(bytes.data(), key.data(), seen) != 0) {
        return {MpaError::bad_key, {}};
    }
    if (bytes.size() < kMpaFrameHeaderLen) return {MpaError::truncated, {}};
    const std::uint8_t flags = bytes[16];
    const std::size_t pd_len = load_be16(&bytes[18]);
    MpaFrame& f = d.frame;
    f.kind = kind;
    f.markers = (flags & mpa_flag::kMarkers) != 0;
    f.crc = (flags & mpa_flag::kCrc) != 0;
    f.reject = (flags & mpa_flag::kReject) != 0;
    f.revision = bytes[17];
    if (!valid_revision(f.revision)) return {MpaError::bad_revision, {}};
    if (pd_len > kMpaMaxPrivateData) return {MpaError::pd_too_long, {}};
    if (bytes.size() < kMpaFrameHeaderLen + pd_len) return {MpaError::truncated, {}};
    f.length = kMpaFrameHeaderLen + pd_len;
    f.private_data = bytes.subspan(kMpaFrameHeaderLen, pd_len);
    if (f.revision == 2 && (flags & mpa_flag::kEnhanced) != 0) {
        if (pd_len >= kMpaIrdOrdLen) {
            f.enhanced = true;
            f.ird_ord = read_ird_ord(f.private_data.first<kMpaIrdOrdLen>());
            f.private_data = f.private_data.subspan(kMpaIrdOrdLen);
        } else if (!f.reject) {
            return {MpaError::missing_ird_ord, {}};
        }
    }
    return d;
}

std::size_t encode_frame(std::span<std::uint8_t> out, const MpaFrame& f) noexcept {
    const std::size_t pd_len = f.pd_length();
    if (pd_len > kMpaMaxPrivateData || out.size() < kMpaFrameHeaderLen + pd_len) return 0;
    std::memcpy(out.data(), key_of(f.kind).data(), kMpaKeyLen);
    out[16] = static_cast<std::uint8_t>(
        (f.markers ? mpa_flag::kMarkers : 0) | (f.crc ? mpa_flag::kCrc : 0) |
        (f.reject ? mpa_flag::kReject : 0) | (f.enhanced ? mpa_flag::kEnhanced : 0));
    out[17] = f.revision;
    store_be16(&out[18], static_cast<std::uint16_t>(pd_len));
    std::size_t at = kMpaFrameHeaderLen;
    if (f.enhanced) {
        write_ird_ord(out.subspan(at).first<kMpaIrdOrdLen>(), f.ird_ord);
        at += kMpaIrdOrdLen;
    }
    if (!f.private_data.empty()) {
        std::memcpy(&out[at], f.private_data.data(), f.private_data.size());
    }
    return at + f.private_data.size();
}

std::size_t FrameReader::feed(std::span<const std::uint8_t> in) noexcept {
    std::size_t taken = 0;
    while (decoded_.error == MpaError::truncated && taken < in.size()) {
        // First the fixed header, then as much private data as it announces. decode_frame()
        // stops a PD_Length above 512 before it can ask for more than buf_ holds.
        const std::size_t need = have_ < kMpaFrameHeaderLen
                                     ? kMpaFrameHeaderLen
                                     : kMpaFrameHeaderLen + load_be16(&buf_[18]);
        const std::size_t n = std::min(need - have_, in.size() - taken);
        std::memcpy(&buf_[have_], &in[taken], n);
        have_ += n;
        taken += n;
        decoded_ = decode_frame({buf_.data(), have_}, kind_);
    }
    return taken;
}

// --- the initiator -----------------------------------------------------------------------

MpaInitiator::MpaInitiator(const MpaConfig& config, std::span<const std::uint8_t> private_data)
    : config_(config) {
    const bool v2 = config.revision == 2;
    if (!valid_revision(config.revision) || config.ird > kMpaIrdOrdMax ||
        config.ord > kMpaIrdOrdMax || config.max_ird > kMpaIrdOrdMax ||
        (config.rtr & ~kRtrAll) != 0 || (config.peer_to_peer && !v2)) {
        fail(MpaError::bad_argument);
        return;
    }
    sent_.kind = FrameKind::request;
    sent_.crc = config.crc == CrcPolicy::require;
    sent_.revision = config.revision;
    sent_.enhanced = v2;
    sent_.ird_ord.ird = config.ird;
    sent_.ird_ord.ord = config.ord;
    if (config.peer_to_peer) {
        sent_.ird_ord.peer_to_peer = true;
        sent_.ird_ord.rtr = config.rtr;
        // A Read RTR needs one outstanding read of ours (siw raises ORD so too).
        if ((config.rtr & kRtrRead) != 0 && sent_.ird_ord.ord == 0) sent_.ird_ord.ord = 1;
    }
    sent_.private_data = private_data;
    out_len_ = encode_frame(out_, sent_);
    if (out_len_ == 0) {
        fail(MpaError::bad_argument);
        return;
    }
    sent_.private_data = std::span<const std::uint8_t>(out_).subspan(out_len_ - private_data.size(),
                                                                     private_data.size());
    sent_.length = out_len_;
}

void MpaInitiator::fail(MpaError e) noexcept {
    state_ = MpaState::failed;
    error_ = e;
}

std::size_t MpaInitiator::on_bytes(std::span<const std::uint8_t> in) noexcept {
    if (state_ != MpaState::awaiting_frame) return 0;
    const std::size_t n = reader_.feed(in);
    const MpaError st = reader_.status();
    if (st == MpaError::none) {
        on_reply(reader_.frame());
    } else if (st != MpaError::truncated) {
        fail(st);
    }
    return n;
}

void MpaInitiator::on_reply(const MpaFrame& rep) noexcept {
    // The responder answers at our revision or below (a revision 1 peer to our 2).
    if (rep.revision > sent_.revision) return fail(MpaError::bad_revision);
    result_.revision = rep.revision;
    result_.peer_private_data = rep.private_data;
    if (rep.reject) {
        state_ = MpaState::rejected;
        return;
    }
    if (rep.markers) return fail(MpaError::markers_requested);
    if (rep.crc && config_.crc == CrcPolicy::refuse) return fail(MpaError::crc_refused);
    // RFC 5044 §7.1.1: C in either frame means CRCs both ways. (siw, when it requires
    // CRCs, also refuses a reply with C clear; the RFC does not ask for that.)
    result_.crc = sent_.crc || rep.crc;
    result_.ird = sent_.ird_ord.ird;
    result_.ord = sent_.ird_ord.ord;
    if (rep.revision == 2) {
        if (!rep.enhanced) return fail(MpaError::missing_ird_ord);
        // RFC 6581 §9.2: the responder's ORD must fit our IRD (we may grow to max_ird);
        // our ORD comes down to its IRD.
        if (rep.ird_ord.ord > result_.ird) {
            if (rep.ird_ord.ord > std::max(config_.max_ird, config_.ird)) {
                return fail(MpaError::insufficient_ird);
            }
            result_.ird = rep.ird_ord.ord;
        }
        result_.ord = std::min(result_.ord, rep.ird_ord.ird);
    }
    // Peer-to-peer asked for and granted: the RTR kind the reply chose, which must be one we
    // offered. A responder that does not grant it (revision 1, or no P bit) leaves us none.
    if (sent_.ird_ord.peer_to_peer && rep.enhanced && rep.ird_ord.peer_to_peer) {
        result_.rtr = first_rtr(rep.ird_ord.rtr & sent_.ird_ord.rtr);
        if (result_.rtr == Rtr::none) return fail(MpaError::no_matching_rtr);
    }
    state_ = MpaState::established;
}

// --- the responder -----------------------------------------------------------------------

MpaResponder::MpaResponder(const MpaConfig& config) : config_(config) {
    if (!valid_revision(config.revision) || (config.rtr & ~kRtrAll) != 0) {
        state_ = MpaState::failed;
        error_ = MpaError::bad_argument;
    }
}

std::size_t MpaResponder::on_bytes(std::span<const std::uint8_t> in) noexcept {
    if (state_ != MpaState::awaiting_frame) return 0;
    const std::size_t n = reader_.feed(in);
    const MpaError st = reader_.status();
    if (st == MpaError::none) {
        on_request(reader_.frame());
    } else if (st != MpaError::truncated) {
        state_ = MpaState::failed;
        error_ = st;
    }
    return n;
}

MpaFrame MpaResponder::reply_base() const noexcept {
    const MpaFrame& req = request();
    MpaFrame f;
    f.kind = FrameKind::reply;
    f.revision = std::min(config_.revision, req.revision);
    f.crc = req.crc || config_.crc == CrcPolicy::require;
    f.enhanced = f.revision == 2 && req.enhanced;
    return f;
}

void MpaResponder::on_request(const MpaFrame& req) noexcept {
    // What snic cannot serve is refused at once with a reject, no private data, M clear,
    // as siw's siw_proc_mpareq does; the user never sees the request.
    MpaError refusal = MpaError::none;
    if (req.markers) {
        refusal = MpaError::markers_requested;
    } else if (req.crc && config_.crc == CrcPolicy::refuse) {
        refusal = MpaError::crc_refused;
    }
    if (refusal == MpaError::none) {
        state_ = MpaState::request_received;
        return;
    }
    MpaFrame f = reply_base();
    f.reject = true;
    if (refusal == MpaError::crc_refused) f.crc = false;
    out_len_ = encode_frame(out_, f);
    result_.revision = f.revision;
    result_.peer_private_data = req.private_data;
    state_ = MpaState::failed;
    error_ = refusal;
}

std::uint16_t MpaResponder::ulp_ord() const noexcept {
    const std::uint16_t ord = request().ird_ord.ord;
    return ord == 1 && p2p_granted() && choose_rtr() == Rtr::read ? 0 : ord;
}

bool MpaResponder::p2p_granted() const noexcept {
    return reply_base().enhanced && request().ird_ord.peer_to_peer && config_.peer_to_peer;
}

Rtr MpaResponder::choose_rtr() const noexcept {
    // An initiator that names no kind gets our first (siw proposes Write then).
    const std::uint8_t offered = request().ird_ord.rtr;
    return first_rtr(offered == 0 ? config_.rtr : offered & config_.rtr);
}

MpaError MpaResponder::accept(std::span<const std::uint8_t> private_data, std::uint16_t ird,
                              std::uint16_t ord) noexcept {
    if (state_ != MpaState::request_received) return MpaError::wrong_state;
    MpaFrame f = reply_base();
    if (ird > kMpaIrdOrdMax || ord > kMpaIrdOrdMax ||
        private_data.size() + (f.enhanced ? kMpaIrdOrdLen : 0) > kMpaMaxPrivateData) {
        return MpaError::bad_argument;
    }
    const MpaFrame& req = request();
    Rtr rtr = Rtr::none;
    if (p2p_granted()) {
        rtr = choose_rtr();
        if (rtr == Rtr::none) return MpaError::no_matching_rtr;
    }
    if (f.enhanced) {
        // RFC 6581 §9.2: never more reads outstanding than the initiator can take. Our IRD
        // grows to the initiator's ORD as far as we can go, as siw_accept's relaxed
        // negotiation does; the initiator's ORD comes down to what it ends at.
        ord = std::min(ord, req.ird_ord.ird);
        ird = std::max(ird, std::min(req.ird_ord.ord, config_.max_ird));
        if (rtr == Rtr::read && ird == 0) ird = 1;
        f.ird_ord.ird = ird;
        f.ird_ord.ord = ord;
        f.ird_ord.peer_to_peer = rtr != Rtr::none;
        f.ird_ord.rtr = rtr_bit(rtr);
    }
    f.private_data = private_data;
    out_len_ = encode_frame(out_, f);
    result_.revision = f.revision;
    result_.crc = f.crc;
    result_.ird = ird;
    result_.ord = ord;
    result_.rtr = rtr;
    result_.peer_private_data = req.private_data;
    state_ = MpaState::established;
    return MpaError::none;
}

MpaError MpaResponder::reject(std::span<const std::uint8_t> private_data) noexcept {
    if (state_ != MpaState::request_received) return MpaError::wrong_state;
    MpaFrame f = reply_base();
    f.reject = true;
    f.private_data = private_data;
    if (f.pd_length() > kMpaMaxPrivateData) return MpaError::bad_argument;
    out_len_ = encode_frame(out_, f);
    result_.revision = f.revision;
    result_.peer_private_data = request().private_data;
    state_ = MpaState::rejected;
    return MpaError::none;
}

// --- FPDUs -------------------------------------------------------------------------------

std::size_t seal_fpdu(std::span<std::uint8_t> out, std::size_t ulpdu_len, bool crc) noexcept {
    const std::size_t total = fpdu_size(ulpdu_len);
    if (ulpdu_len > kMaxUlpdu || out.size() < total) return 0;
    const std::size_t covered = total - kFpduCrcLen;
    store_be16(out.data(), static_cast<std::uint16_t>(ulpdu_len));
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(kFpduLengthLen + ulpdu_len),
              out.begin() + static_cast<std::ptrdiff_t>(covered), std::uint8_t{0});
    store_crc(&out[covered], crc ? crc::Crc32c::compute(out.first(covered)) : 0);
    return total;
}

std::uint32_t begin_fpdu(std::span<std::uint8_t> out, std::size_t ulpdu_len,
                         std::size_t head) noexcept {
    if (ulpdu_len > kMaxUlpdu || head > ulpdu_len || out.size() < fpdu_size(ulpdu_len))
        return crc::Crc32c::kInit;  // seal_fpdu_folded refuses the same FPDU
    store_be16(out.data(), static_cast<std::uint16_t>(ulpdu_len));
    return crc::Crc32c::update(crc::Crc32c::kInit, out.first(kFpduLengthLen + head));
}

std::size_t seal_fpdu_folded(std::span<std::uint8_t> out, std::size_t ulpdu_len,
                             std::uint32_t reg) noexcept {
    const std::size_t total = fpdu_size(ulpdu_len);
    if (ulpdu_len > kMaxUlpdu || out.size() < total) return 0;
    const std::size_t covered = total - kFpduCrcLen;
    const std::span<std::uint8_t> pad =
        out.subspan(kFpduLengthLen + ulpdu_len, covered - kFpduLengthLen - ulpdu_len);
    std::fill(pad.begin(), pad.end(), std::uint8_t{0});
    store_crc(&out[covered], ~crc::Crc32c::update(reg, pad));
    return total;
}

std::size_t write_fpdu(std::span<std::uint8_t> out, std::span<const std::uint8_t> header,
                       std::span<const std::uint8_t> payload, bool crc) noexcept {
    const std::size_t ulpdu_len = header.size() + payload.size();
    if (ulpdu_len > kMaxUlpdu || out.size() < fpdu_size(ulpdu_len)) return 0;
    std::uint8_t* const h = out.data() + kFpduLengthLen;
    std::uint8_t* const p = h + header.size();
    if (!header.empty() && header.data() != h) std::memmove(h, header.data(), header.size());
    if (!payload.empty() && payload.data() != p) std::memmove(p, payload.data(), payload.size());
    return seal_fpdu(out, ulpdu_len, crc);
}

FpduDeframer::FpduDeframer(std::size_t max_ulpdu, bool crc)
    : max_ulpdu_(std::min(max_ulpdu, kMaxUlpdu)),
      crc_(crc),
      mem_(std::make_unique_for_overwrite<std::uint8_t[]>(fpdu_size(max_ulpdu_))),
      buf_(mem_.get(), fpdu_size(max_ulpdu_)) {}

FpduDeframer::Status FpduDeframer::check(std::span<const std::uint8_t> fpdu, Step& s) noexcept {
    const std::size_t covered = fpdu.size() - kFpduCrcLen;
    const std::size_t len = load_be16(fpdu.data());
    // RFC 5044 §7.1.1: with CRCs off the field is valid whatever it holds.
    if (crc_ && fold_ && len >= crc::kCopyFoldMin) {
        s.unchecked = fpdu;
    } else if (crc_ && crc::Crc32c::compute(fpdu.first(covered)) != load_crc(&fpdu[covered])) {
        fatal_ = Status::crc_error;
        return fatal_;
    }
    s.ulpdu = fpdu.subspan(kFpduLengthLen, len);
    ++fpdus_;
    return Status::fpdu;
}

void FpduCrcFold::place(std::uint8_t* dst, std::span<const std::uint8_t> src) noexcept {
    if (!pending() || src.data() < at_) {
        verbs::place(dst, src.data(), src.size());
        return;
    }
    reg_ = crc::Crc32c::update(reg_, {at_, src.data()});
    reg_ = crc::Crc32c::update_copy(reg_, dst, src);
    at_ = src.data() + src.size();
}

bool FpduCrcFold::verify() noexcept {
    if (!pending()) return good_;
    const std::uint8_t* crc_at = fpdu_.data() + fpdu_.size() - kFpduCrcLen;
    reg_ = crc::Crc32c::update(reg_, {at_, crc_at});
    good_ = ~reg_ == load_crc(crc_at);
    done_ = true;
    return good_;
}

FpduDeframer::Step FpduDeframer::next(std::span<const std::uint8_t> in) noexcept {
    Step s;
    if (fatal_ != Status::need_more) {
        s.status = fatal_;
        return s;
    }
    if (held_ == 0) {
        if (in.size() >= kFpduLengthLen) {
            const std::size_t len = load_be16(in.data());
            if (len > max_ulpdu_) {
                fatal_ = s.status = Status::too_long;
                return s;
            }
            want_ = fpdu_size(len);
            if (in.size() >= want_) {  // whole in this chunk: in place, no copy
                s.status = check(in.first(want_), s);
                if (s.status == Status::fpdu) s.consumed = want_;
                want_ = 0;
                return s;
            }
        }
        if (!in.empty()) std::memcpy(buf_.data(), in.data(), in.size());
        held_ = in.size();
        s.consumed = in.size();
        return s;
    }
    // A straddling FPDU: its length first, then the rest of it.
    std::size_t taken = 0;
    if (held_ < kFpduLengthLen) {
        taken = std::min(kFpduLengthLen - held_, in.size());
        if (taken > 0) std::memcpy(&buf_[held_], in.data(), taken);
        held_ += taken;
        if (held_ < kFpduLengthLen) {
            s.consumed = taken;
            return s;
        }
        const std::size_t len = load_be16(buf_.data());
        if (len > max_ulpdu_) {
            fatal_ = s.status = Status::too_long;
            s.consumed = taken;
            return s;
        }
        want_ = fpdu_size(len);
    }
    const std::size_t n = std::min(want_ - held_, in.size() - taken);
    if (n > 0) std::memcpy(&buf_[held_], in.data() + taken, n);
    held_ += n;
    s.consumed = taken + n;
    if (held_ < want_) return s;
    s.status = check(std::span<const std::uint8_t>(buf_).first(want_), s);
    held_ = 0;
    want_ = 0;
    return s;
}

}  // namespace snic::iwarp
