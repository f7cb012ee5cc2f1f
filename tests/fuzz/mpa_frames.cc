// libFuzzer target: proto/iwarp/mpa.h's connection setup and FPDU framing, fed directly
// (iwarp_qp fuzzes the deframer inside a QP). Four modes, by the first byte:
// - frames: any bytes to decode_frame() as a request and as a reply, and to a FrameReader
//   cut at chosen points;
// - negotiation: an MpaInitiator and an MpaResponder with chosen configs (revision, CRC
//   policy, IRD/ORD, peer-to-peer and RTR kinds, valid or not) and private data, the
//   request and reply passed between them cut anywhere with stream bytes after them, the
//   responder accepting (IRD/ORD chosen) or rejecting; or either side fed any bytes;
// - deframing any byte stream, and deframing a stream of FPDUs built by write_fpdu() (one
//   byte corrupt or not), with a chosen max ULPDU and CRCs on or off, cut anywhere.
// Asserts: a decoded frame lies inside the input (its private data ends where its length
// says, length = 20 + PD_Length <= 532), its flags are the input's, encode_frame() writes
// the same bytes back (reserved flag bits aside) and they decode to the same frame; every
// shorter prefix is truncated, a wrong key is bad_key; a FrameReader fed the bytes in any
// cuts ends as decode_frame() of all of them, having taken exactly the frame. Negotiation:
// the request and reply are frames that decode to what was configured and chosen; each
// side takes exactly its frame's bytes and leaves what follows; a reject reaches the
// initiator as rejected with its private data; when both sides are established they agree
// on revision, CRC and RTR, and each side's ORD is at most the other's IRD (RFC 6581 §9.2).
// Deframing: every ULPDU yielded is the stream's bytes after its length field, at most the
// max ULPDU, with a good CRC when CRCs are on; a fatal status is right for the FPDU it stops
// at and sticks; need_more means every byte was taken; the same stream cut at any points
// yields the same ULPDUs and ends in the same status; a stream built by write_fpdu()
// deframes to exactly its ULPDUs.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "proto/crc/crc.h"
#include "proto/iwarp/mpa.h"
#include "tests/fuzz/fuzz_support.h"

namespace snic::fuzz {
namespace {

using namespace snic::iwarp;
using Bytes = std::vector<std::uint8_t>;

std::uint16_t be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

bool same_bytes(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

bool same_frame(const MpaFrame& a, const MpaFrame& b) {
    return a.kind == b.kind && a.markers == b.markers && a.crc == b.crc && a.reject == b.reject &&
           a.revision == b.revision && a.enhanced == b.enhanced &&
           (!a.enhanced || a.ird_ord == b.ird_ord) && a.length == b.length &&
           same_bytes(a.private_data, b.private_data);
}

// Cut points: each chunk 1 + the next cut byte (0 when the cuts run out: all the rest).
class Cutter {
  public:
    explicit Cutter(std::span<const std::uint8_t> cuts) : cuts_(cuts) {}
    std::size_t next(std::size_t left) {
        if (left == 0) return 0;
        if (i_ >= cuts_.size()) return left;
        const std::size_t n = 1 + cuts_[i_++] * 3u;
        return std::min(n, left);
    }

  private:
    std::span<const std::uint8_t> cuts_;
    std::size_t i_ = 0;
};

// --- frames ----------------------------------------------------------------------------

void check_decode(std::span<const std::uint8_t> bytes, FrameKind kind, std::size_t cut) {
    const MpaDecoded d = decode_frame(bytes, kind);
    SNIC_FUZZ_REQUIRE(d.error < MpaError::count_);
    const std::string_view key = kind == FrameKind::request ? kMpaRequestKey : kMpaReplyKey;
    const std::size_t seen = std::min(bytes.size(), kMpaKeyLen);
    const bool key_ok = seen == 0 || std::memcmp(bytes.data(), key.data(), seen) == 0;
    SNIC_FUZZ_REQUIRE(key_ok == (d.error != MpaError::bad_key));
    if (d.error == MpaError::truncated) {
        SNIC_FUZZ_REQUIRE(bytes.size() < kMpaFrameHeaderLen ||
                          bytes.size() < kMpaFrameHeaderLen + be16(&bytes[18]));
    }
    if (d.error != MpaError::none) return;
    const MpaFrame& f = d.frame;
    SNIC_FUZZ_REQUIRE(f.kind == kind);
    SNIC_FUZZ_REQUIRE(f.revision == 1 || f.revision == 2);
    SNIC_FUZZ_REQUIRE(!f.enhanced || f.revision == 2);
    SNIC_FUZZ_REQUIRE(f.pd_length() <= kMpaMaxPrivateData);
    SNIC_FUZZ_REQUIRE(f.length == kMpaFrameHeaderLen + f.pd_length());
    SNIC_FUZZ_REQUIRE(f.length <= bytes.size() && f.pd_length() == be16(&bytes[18]));
    // The private data is the frame's tail, inside the bytes given.
    SNIC_FUZZ_REQUIRE(f.private_data.data() >= bytes.data() + kMpaFrameHeaderLen);
    SNIC_FUZZ_REQUIRE(f.private_data.data() + f.private_data.size() == bytes.data() + f.length);
    const std::uint8_t flags = bytes[16];
    SNIC_FUZZ_REQUIRE(f.markers == ((flags & mpa_flag::kMarkers) != 0));
    SNIC_FUZZ_REQUIRE(f.crc == ((flags & mpa_flag::kCrc) != 0));
    SNIC_FUZZ_REQUIRE(f.reject == ((flags & mpa_flag::kReject) != 0));
    SNIC_FUZZ_REQUIRE(!f.enhanced || (flags & mpa_flag::kEnhanced) != 0);
    // encode(decode(x)) is x, the reserved flag bits (and an enhanced flag that was not
    // taken) aside, and decodes to the same frame.
    std::array<std::uint8_t, kMpaMaxFrameLen> out{};
    const std::size_t n = encode_frame(out, f);
    SNIC_FUZZ_REQUIRE(n == f.length);
    SNIC_FUZZ_REQUIRE(std::memcmp(out.data(), bytes.data(), kMpaKeyLen) == 0);
    const std::uint8_t kept =
        static_cast<std::uint8_t>(mpa_flag::kMarkers | mpa_flag::kCrc | mpa_flag::kReject |
                                  (f.enhanced ? mpa_flag::kEnhanced : 0));
    SNIC_FUZZ_REQUIRE(out[16] == (flags & kept));
    SNIC_FUZZ_REQUIRE(std::memcmp(out.data() + 17, bytes.data() + 17, n - 17) == 0);
    const MpaDecoded again = decode_frame(std::span(out).first(n), kind);
    SNIC_FUZZ_REQUIRE(again.error == MpaError::none && same_frame(again.frame, f));
    SNIC_FUZZ_REQUIRE(encode_frame(std::span(out).first(n - 1), f) == 0);
    // Any shorter prefix is a frame still to come.
    SNIC_FUZZ_REQUIRE(decode_frame(bytes.first(f.length - 1), kind).error == MpaError::truncated);
    SNIC_FUZZ_REQUIRE(decode_frame(bytes.first(cut % f.length), kind).error == MpaError::truncated);
}

// A FrameReader fed `bytes` in cuts ends as decode_frame() of all of them.
void check_reader(std::span<const std::uint8_t> bytes, FrameKind kind, Cutter cut) {
    FrameReader r(kind);
    std::size_t at = 0;
    while (at < bytes.size() && r.status() == MpaError::truncated) {
        const std::size_t n = cut.next(bytes.size() - at);
        const std::size_t took = r.feed(bytes.subspan(at, n));
        SNIC_FUZZ_REQUIRE(took <= n);
        SNIC_FUZZ_REQUIRE(took == n || r.status() != MpaError::truncated);
        at += took;
        if (took < n) break;
    }
    const MpaDecoded d = decode_frame(bytes, kind);
    SNIC_FUZZ_REQUIRE(r.status() == d.error);
    if (d.error == MpaError::none) {
        SNIC_FUZZ_REQUIRE(at == d.frame.length);
        SNIC_FUZZ_REQUIRE(same_frame(r.frame(), d.frame));
        // Nothing more is taken once the frame is whole.
        SNIC_FUZZ_REQUIRE(r.feed(bytes) == 0);
    }
}

void frames(Input& in) {
    const std::size_t cut = in.u16();
    const std::span<const std::uint8_t> cuts = in.bytes(in.u8() % 16);
    const std::uint8_t how = in.u8();
    Bytes bytes;
    // Most inputs start with a key, so that the fuzzer works on what follows it.
    if (how % 4 == 1) bytes.assign(kMpaRequestKey.begin(), kMpaRequestKey.end());
    if (how % 4 == 2) bytes.assign(kMpaReplyKey.begin(), kMpaReplyKey.end());
    const std::span<const std::uint8_t> rest = in.rest();
    bytes.insert(bytes.end(), rest.begin(), rest.end());
    for (const FrameKind k : {FrameKind::request, FrameKind::reply}) {
        check_decode(bytes, k, cut);
        check_reader(bytes, k, Cutter(cuts));
    }
}

// --- negotiation -----------------------------------------------------------------------

MpaConfig pick_config(Input& in) {
    MpaConfig c;
    const std::uint8_t a = in.u8();
    c.revision =
        (a & 0x80) ? static_cast<std::uint8_t>(a % 4) : static_cast<std::uint8_t>(1 + (a & 1));
    c.crc = static_cast<CrcPolicy>((a >> 1) % 3);
    c.peer_to_peer = (a & 8) != 0;
    const std::uint8_t b = in.u8();
    const bool wild = (b & 0x80) != 0;  // values past 14 bits and bad RTR sets too
    c.ird = wild ? in.u16() : in.u8() % 16;
    c.ord = wild ? in.u16() : in.u8() % 16;
    c.max_ird = wild ? in.u16() : in.u8() % 32;
    c.rtr = wild ? in.u8() : static_cast<std::uint8_t>(b & kRtrAll);
    return c;
}

bool config_ok(const MpaConfig& c, bool initiator) {
    if (c.revision != 1 && c.revision != 2) return false;
    if ((c.rtr & ~kRtrAll) != 0) return false;
    if (!initiator) return true;
    return c.ird <= kMpaIrdOrdMax && c.ord <= kMpaIrdOrdMax && c.max_ird <= kMpaIrdOrdMax &&
           !(c.peer_to_peer && c.revision != 2);
}

// Feeds `frame` and then `after` (the first FPDUs) to a side, in cuts. Returns how many
// bytes it took.
template <typename Side>
std::size_t feed(Side& side, std::span<const std::uint8_t> frame,
                 std::span<const std::uint8_t> after, Cutter cut) {
    Bytes all(frame.begin(), frame.end());
    all.insert(all.end(), after.begin(), after.end());
    std::size_t at = 0;
    while (at < all.size()) {
        const std::size_t n = cut.next(all.size() - at);
        const std::size_t took = side.on_bytes(std::span(all).subspan(at, n));
        SNIC_FUZZ_REQUIRE(took <= n);
        at += took;
        if (took < n) break;
    }
    return at;
}

void negotiation(Input& in) {
    const MpaConfig ic = pick_config(in);
    const MpaConfig rc = pick_config(in);
    const Bytes ipd = [&] {
        const auto s = in.bytes(in.u8() < 240 ? in.u8() % 64 : in.u16() % 600);
        return Bytes(s.begin(), s.end());
    }();
    const std::span<const std::uint8_t> cuts = in.bytes(in.u8() % 8);
    const std::span<const std::uint8_t> after = in.bytes(in.u8() % 16);

    MpaInitiator init(ic, ipd);
    const bool ic_ok = config_ok(ic, true) &&
                       ipd.size() + (ic.revision == 2 ? kMpaIrdOrdLen : 0) <= kMpaMaxPrivateData;
    SNIC_FUZZ_REQUIRE((init.state() == MpaState::awaiting_frame) == ic_ok);
    if (!ic_ok) {
        SNIC_FUZZ_REQUIRE(init.state() == MpaState::failed &&
                          init.error() == MpaError::bad_argument);
        return;
    }
    // The request is a frame saying what the config asked for.
    const MpaDecoded req = decode_frame(init.request(), FrameKind::request);
    SNIC_FUZZ_REQUIRE(req.error == MpaError::none && req.frame.length == init.request().size());
    SNIC_FUZZ_REQUIRE(req.frame.revision == ic.revision && !req.frame.markers && !req.frame.reject);
    SNIC_FUZZ_REQUIRE(req.frame.crc == (ic.crc == CrcPolicy::require));
    SNIC_FUZZ_REQUIRE(req.frame.enhanced == (ic.revision == 2));
    SNIC_FUZZ_REQUIRE(same_bytes(req.frame.private_data, ipd));
    if (req.frame.enhanced) {
        SNIC_FUZZ_REQUIRE(req.frame.ird_ord.ird == ic.ird);
        SNIC_FUZZ_REQUIRE(req.frame.ird_ord.peer_to_peer == ic.peer_to_peer);
        if (ic.peer_to_peer) SNIC_FUZZ_REQUIRE(req.frame.ird_ord.rtr == ic.rtr);
        SNIC_FUZZ_REQUIRE(req.frame.ird_ord.ord >= ic.ord);
    }

    const std::uint8_t mode = in.u8();
    if (mode >= 240 && config_ok(rc, false)) {
        // A responder fed anything: it takes at most one frame and answers what it took.
        MpaResponder resp(rc);
        const std::span<const std::uint8_t> junk = in.rest();
        const std::size_t took = feed(resp, junk, {}, Cutter(cuts));
        const MpaDecoded d = decode_frame(junk, FrameKind::request);
        SNIC_FUZZ_REQUIRE(took <= junk.size());
        if (d.error != MpaError::none) {
            SNIC_FUZZ_REQUIRE(resp.error() ==
                              (d.error == MpaError::truncated ? MpaError::none : d.error));
            SNIC_FUZZ_REQUIRE(resp.reply().empty());
            return;
        }
        SNIC_FUZZ_REQUIRE(took == d.frame.length);
        if (resp.state() == MpaState::failed) {
            SNIC_FUZZ_REQUIRE(resp.error() == MpaError::markers_requested ||
                              resp.error() == MpaError::crc_refused);
            const MpaDecoded rej = decode_frame(resp.reply(), FrameKind::reply);
            SNIC_FUZZ_REQUIRE(rej.error == MpaError::none && rej.frame.reject &&
                              !rej.frame.markers);
            return;
        }
        SNIC_FUZZ_REQUIRE(resp.state() == MpaState::request_received);
        if (resp.accept({}, ic.ird, ic.ord) != MpaError::none) return;
        const MpaDecoded rep = decode_frame(resp.reply(), FrameKind::reply);
        SNIC_FUZZ_REQUIRE(rep.error == MpaError::none && !rep.frame.reject);
        SNIC_FUZZ_REQUIRE(rep.frame.revision <= d.frame.revision);
        if (rep.frame.enhanced) SNIC_FUZZ_REQUIRE(rep.frame.ird_ord.ord <= d.frame.ird_ord.ird);
        return;
    }
    if (mode >= 224) {
        // The initiator fed anything: it ends in a state that holds together.
        const std::span<const std::uint8_t> junk = in.rest();
        const std::size_t took = feed(init, junk, {}, Cutter(cuts));
        SNIC_FUZZ_REQUIRE(took <= junk.size());
        if (init.state() == MpaState::established) {
            const MpaResult& r = init.result();
            SNIC_FUZZ_REQUIRE(r.revision <= ic.revision && r.revision >= 1);
            SNIC_FUZZ_REQUIRE(r.ord <= req.frame.ird_ord.ord || !req.frame.enhanced);
            SNIC_FUZZ_REQUIRE(r.ird >= ic.ird && r.ird <= std::max(ic.ird, ic.max_ird));
            SNIC_FUZZ_REQUIRE(!ic.peer_to_peer || r.rtr != Rtr::none);
            SNIC_FUZZ_REQUIRE(r.crc || ic.crc != CrcPolicy::require);
        }
        return;
    }

    MpaResponder resp(rc);
    if (!config_ok(rc, false)) {
        SNIC_FUZZ_REQUIRE(resp.state() == MpaState::failed &&
                          resp.error() == MpaError::bad_argument);
        return;
    }
    const std::size_t took = feed(resp, init.request(), after, Cutter(cuts));
    SNIC_FUZZ_REQUIRE(took == init.request().size());  // the request, not the FPDUs after it
    const bool refused = req.frame.crc && rc.crc == CrcPolicy::refuse;
    if (refused) {
        SNIC_FUZZ_REQUIRE(resp.state() == MpaState::failed &&
                          resp.error() == MpaError::crc_refused);
        const MpaDecoded rej = decode_frame(resp.reply(), FrameKind::reply);
        SNIC_FUZZ_REQUIRE(rej.error == MpaError::none && rej.frame.reject && !rej.frame.markers);
        return;
    }
    SNIC_FUZZ_REQUIRE(resp.state() == MpaState::request_received);
    SNIC_FUZZ_REQUIRE(same_frame(resp.request(), req.frame));

    const std::uint8_t act = in.u8();
    const std::uint16_t ird = (act & 0x80) ? in.u16() : in.u8() % 16;
    const std::uint16_t ord = (act & 0x80) ? in.u16() : in.u8() % 16;
    const Bytes rpd = [&] {
        const auto s = in.bytes(in.u8() < 240 ? in.u8() % 64 : in.u16() % 600);
        return Bytes(s.begin(), s.end());
    }();
    bool rejected = false;
    if (act % 4 == 0) {
        SNIC_FUZZ_REQUIRE(resp.reject(rpd) == MpaError::none ||
                          rpd.size() + 4 > kMpaMaxPrivateData);
        rejected = resp.state() == MpaState::rejected;
    } else {
        const MpaError e = resp.accept(rpd, ird, ord);
        if (e != MpaError::none) {
            SNIC_FUZZ_REQUIRE(e == MpaError::bad_argument || e == MpaError::no_matching_rtr);
            SNIC_FUZZ_REQUIRE(resp.state() == MpaState::request_received);  // no effect
            return;
        }
        SNIC_FUZZ_REQUIRE(resp.state() == MpaState::established);
        SNIC_FUZZ_REQUIRE(resp.accept(rpd, ird, ord) == MpaError::wrong_state);
        SNIC_FUZZ_REQUIRE(resp.reject(rpd) == MpaError::wrong_state);
    }
    if (resp.state() == MpaState::request_received) return;  // reject refused its arguments

    const MpaDecoded rep = decode_frame(resp.reply(), FrameKind::reply);
    SNIC_FUZZ_REQUIRE(rep.error == MpaError::none && rep.frame.length == resp.reply().size());
    SNIC_FUZZ_REQUIRE(rep.frame.reject == rejected && !rep.frame.markers);
    SNIC_FUZZ_REQUIRE(rep.frame.revision == std::min(ic.revision, rc.revision));
    SNIC_FUZZ_REQUIRE(same_bytes(rep.frame.private_data, rpd));
    if (rep.frame.enhanced && !rejected) {
        SNIC_FUZZ_REQUIRE(rep.frame.ird_ord.ord <= req.frame.ird_ord.ird);  // RFC 6581 §9.2
    }

    const std::size_t took2 = feed(init, resp.reply(), after, Cutter(cuts));
    SNIC_FUZZ_REQUIRE(took2 == resp.reply().size());
    if (rejected) {
        SNIC_FUZZ_REQUIRE(init.state() == MpaState::rejected);
        SNIC_FUZZ_REQUIRE(same_bytes(init.result().peer_private_data, rpd));
        return;
    }
    if (init.state() != MpaState::established) {
        SNIC_FUZZ_REQUIRE(init.state() == MpaState::failed);
        SNIC_FUZZ_REQUIRE(init.error() == MpaError::crc_refused ||
                          init.error() == MpaError::no_matching_rtr);
        return;
    }
    const MpaResult& a = init.result();
    const MpaResult& b = resp.result();
    SNIC_FUZZ_REQUIRE(a.revision == b.revision && a.crc == b.crc && a.rtr == b.rtr);
    SNIC_FUZZ_REQUIRE(same_bytes(a.peer_private_data, rpd));
    SNIC_FUZZ_REQUIRE(same_bytes(b.peer_private_data, ipd));
    if (a.revision == 2) {
        SNIC_FUZZ_REQUIRE(a.ord <= b.ird && b.ord <= a.ird);
    }
    if (a.rtr == Rtr::read) SNIC_FUZZ_REQUIRE(b.ird >= 1 && a.ord >= 1);
}

// --- FPDUs -----------------------------------------------------------------------------

struct Deframed {
    std::vector<Bytes> ulpdus;
    FpduDeframer::Status status = FpduDeframer::Status::need_more;
};

// The stream in one piece, each FPDU checked against the bytes it came from.
Deframed deframe_whole(std::span<const std::uint8_t> stream, std::size_t max, bool crc) {
    FpduDeframer d(max, crc);
    const std::size_t limit = std::min(max, kMaxUlpdu);
    Deframed r;
    std::size_t pos = 0;
    r.status = d.feed(stream, [&](std::span<const std::uint8_t> u) {
        SNIC_FUZZ_REQUIRE(pos + kFpduLengthLen <= stream.size());
        const std::size_t len = be16(&stream[pos]);
        SNIC_FUZZ_REQUIRE(u.size() == len && len <= limit);
        const std::size_t size = fpdu_size(len);
        SNIC_FUZZ_REQUIRE(pos + size <= stream.size());
        SNIC_FUZZ_REQUIRE(same_bytes(u, stream.subspan(pos + kFpduLengthLen, len)));
        if (crc) {
            const std::size_t covered = size - kFpduCrcLen;
            const std::uint8_t* c = &stream[pos + covered];
            const std::uint32_t want = std::uint32_t{c[0]} | std::uint32_t{c[1]} << 8 |
                                       std::uint32_t{c[2]} << 16 | std::uint32_t{c[3]} << 24;
            SNIC_FUZZ_REQUIRE(crc::Crc32c::compute(stream.subspan(pos, covered)) == want);
        }
        r.ulpdus.emplace_back(u.begin(), u.end());
        pos += size;
    });
    SNIC_FUZZ_REQUIRE(d.fpdus() == r.ulpdus.size());
    const std::size_t left = stream.size() - pos;
    switch (r.status) {
        case FpduDeframer::Status::need_more:
            // What is left is less than the next FPDU, and held.
            SNIC_FUZZ_REQUIRE(d.buffered() == left);
            SNIC_FUZZ_REQUIRE(left < kFpduLengthLen || left < fpdu_size(be16(&stream[pos])));
            break;
        case FpduDeframer::Status::too_long:
            SNIC_FUZZ_REQUIRE(left >= kFpduLengthLen && be16(&stream[pos]) > limit);
            break;
        case FpduDeframer::Status::crc_error:
            SNIC_FUZZ_REQUIRE(crc && left >= kFpduLengthLen &&
                              left >= fpdu_size(be16(&stream[pos])));
            break;
        case FpduDeframer::Status::fpdu:
            SNIC_FUZZ_REQUIRE(false);
            break;
    }
    return r;
}

// The same stream in cuts, step by step.
Deframed deframe_cut(std::span<const std::uint8_t> stream, std::size_t max, bool crc, Cutter cut) {
    FpduDeframer d(max, crc);
    const std::size_t limit = std::min(max, kMaxUlpdu);
    Deframed r;
    std::size_t at = 0;
    while (at < stream.size()) {
        std::span<const std::uint8_t> chunk = stream.subspan(at, cut.next(stream.size() - at));
        at += chunk.size();
        while (true) {
            const FpduDeframer::Step s = d.next(chunk);
            SNIC_FUZZ_REQUIRE(s.consumed <= chunk.size());
            chunk = chunk.subspan(s.consumed);
            if (s.status == FpduDeframer::Status::fpdu) {
                SNIC_FUZZ_REQUIRE(s.ulpdu.size() <= limit);
                r.ulpdus.emplace_back(s.ulpdu.begin(), s.ulpdu.end());
                continue;
            }
            SNIC_FUZZ_REQUIRE(s.ulpdu.empty());
            if (s.status == FpduDeframer::Status::need_more) {
                SNIC_FUZZ_REQUIRE(chunk.empty());  // everything taken
                break;
            }
            // Fatal, and it sticks.
            r.status = s.status;
            const FpduDeframer::Step again = d.next(stream);
            SNIC_FUZZ_REQUIRE(again.status == s.status && again.consumed == 0);
            return r;
        }
    }
    return r;
}

void check_deframe(std::span<const std::uint8_t> stream, std::size_t max, bool crc, Cutter cut,
                   const std::vector<Bytes>* built) {
    const Deframed whole = deframe_whole(stream, max, crc);
    const Deframed cuts = deframe_cut(stream, max, crc, cut);
    SNIC_FUZZ_REQUIRE(whole.status == cuts.status);
    SNIC_FUZZ_REQUIRE(whole.ulpdus == cuts.ulpdus);
    if (built != nullptr) {
        SNIC_FUZZ_REQUIRE(whole.status == FpduDeframer::Status::need_more);
        SNIC_FUZZ_REQUIRE(whole.ulpdus == *built);
    }
}

void deframe_raw(Input& in) {
    const std::size_t max = in.u8() < 128 ? kMaxUlpdu : in.u16();
    const bool crc = (in.u8() & 1) != 0;
    const Cutter cut(in.bytes(in.u8() % 32));
    check_deframe(in.rest(), max, crc, cut, nullptr);
}

void deframe_built(Input& in) {
    const std::size_t max = in.u8() < 128 ? kMaxUlpdu : in.u16();
    const std::uint8_t how = in.u8();
    const bool crc = (how & 1) != 0;
    const Cutter cut(in.bytes(in.u8() % 32));
    Bytes stream;
    std::vector<Bytes> ulpdus;
    bool fits = true;
    for (int i = 0; i < 16 && !in.empty(); ++i) {
        const std::uint8_t l = in.u8();
        const std::size_t len = l < 200 ? l : in.u16() % 4096;
        Bytes u(len);
        const auto src = in.bytes(len);
        std::copy(src.begin(), src.end(), u.begin());
        Bytes f(fpdu_size(len) + 3, 0xEE);
        const std::size_t n = write_fpdu(f, u, {}, crc);
        SNIC_FUZZ_REQUIRE(n == fpdu_size(len) && n % 4 == 0);
        SNIC_FUZZ_REQUIRE(f[n] == 0xEE);  // nothing written past the FPDU
        // The largest ULPDU an MSS of this FPDU's size carries is at least this one.
        SNIC_FUZZ_REQUIRE(max_ulpdu(n) >= len && fpdu_size(max_ulpdu(n)) <= n);
        stream.insert(stream.end(), f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
        if (len > std::min(max, kMaxUlpdu)) fits = false;
        ulpdus.push_back(std::move(u));
    }
    const bool corrupt = (how & 2) != 0 && !stream.empty();
    if (corrupt) {
        const std::uint8_t x = in.u8();
        stream[in.u16() % stream.size()] ^= x == 0 ? 0x40 : x;
    }
    check_deframe(stream, max, crc, cut, fits && !corrupt ? &ulpdus : nullptr);
}

}  // namespace
}  // namespace snic::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    snic::fuzz::Input in(data, size);
    switch (in.u8() % 4) {
        case 0:
            snic::fuzz::frames(in);
            break;
        case 1:
            snic::fuzz::negotiation(in);
            break;
        case 2:
            snic::fuzz::deframe_raw(in);
            break;
        case 3:
            snic::fuzz::deframe_built(in);
            break;
    }
    return 0;
}
