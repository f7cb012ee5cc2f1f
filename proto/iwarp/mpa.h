// MPA (RFC 5044, RFC 6581): the request/reply frames that open an iWARP connection, the
// negotiation one side runs over them, and FPDU framing of ULPDUs (DDP segments) after.
//
// Pure, like proto/tcp: no DPDK, no syscalls, no exceptions, no logs, nothing allocated
// after construction; timeouts are the caller's. Markers are never sent nor accepted: a
// peer that asks for them is refused, as Linux siw does (RFC 5044 lets a receiver require
// markers of its peer; snic cannot honour that, so the connection cannot be made).
//
// Use. The side that opened TCP builds an MpaInitiator, sends request(), and feeds every
// byte the peer sends to on_bytes() until the state leaves awaiting_frame; the bytes after
// the reply (on_bytes() consumed less than it was given) are the first FPDUs and belong to
// the engine. The listening side builds an MpaResponder, feeds it bytes until
// request_received, shows request() to its user, and calls accept() or reject(); either
// way it sends reply(). Both sides then frame with write_fpdu() and deframe with
// FpduDeframer, with CRCs as result().crc says.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

namespace snic::iwarp {

// --- request/reply frames (RFC 5044 §7.1, RFC 6581 §9) -----------------------------------

inline constexpr std::string_view kMpaRequestKey = "MPA ID Req Frame";
inline constexpr std::string_view kMpaReplyKey = "MPA ID Rep Frame";
inline constexpr std::size_t kMpaKeyLen = 16;
// Key, flags, revision, PD_Length.
inline constexpr std::size_t kMpaFrameHeaderLen = kMpaKeyLen + 4;
// PD_Length's limit (RFC 5044 §7.1.1), the IRD/ORD header included in revision 2.
inline constexpr std::size_t kMpaMaxPrivateData = 512;
inline constexpr std::size_t kMpaMaxFrameLen = kMpaFrameHeaderLen + kMpaMaxPrivateData;
// RFC 6581 §9.1: the IRD/ORD header at the start of a revision 2 frame's private data.
inline constexpr std::size_t kMpaIrdOrdLen = 4;
inline constexpr std::uint16_t kMpaIrdOrdMax = 0x3fff;  // IRD and ORD are 14 bits

// The flags byte (offset 16). Enhanced is RFC 6581's: set in revision 2 frames that carry
// the IRD/ORD header (siw's MPA_RR_FLAG_ENHANCED, cxgb4's MPA_ENHANCED_RDMA_CONN).
namespace mpa_flag {
inline constexpr std::uint8_t kMarkers = 0x80;   // M: the sender wants markers
inline constexpr std::uint8_t kCrc = 0x40;       // C: CRCs wanted (either side's C turns them on)
inline constexpr std::uint8_t kReject = 0x20;    // R: reply only, the connection is rejected
inline constexpr std::uint8_t kEnhanced = 0x10;  // revision 2: IRD/ORD header present
}  // namespace mpa_flag

// The zero-length RDMA message a peer-to-peer initiator sends first so the responder may
// enter RTS (RFC 6581 §9.1, "ready to receive").
enum class Rtr : std::uint8_t { none, send, write, read };

// Sets of RTR kinds, as offered in a request.
inline constexpr std::uint8_t kRtrSend = 1;
inline constexpr std::uint8_t kRtrWrite = 2;
inline constexpr std::uint8_t kRtrRead = 4;
inline constexpr std::uint8_t kRtrAll = kRtrSend | kRtrWrite | kRtrRead;

// Where each flag of the IRD/ORD header lives (RFC 6581 §9.1):
//   |P|L|   IRD (14 bits)   |A|B|   ORD (14 bits)   |
// P peer-to-peer, L zero-length Send, A zero-length RDMA Write, B zero-length RDMA Read.
struct IrdOrdBit {
    std::uint8_t rtr;    // kRtr* bit, 0 for P
    bool in_ord_word;    // the second 16-bit word (else the first, IRD's)
    std::uint16_t mask;  // within that word, host order
};
inline constexpr IrdOrdBit kIrdOrdP2p = {0, false, 0x8000};
inline constexpr std::array<IrdOrdBit, 3> kIrdOrdRtrBits = {{
    {kRtrSend, false, 0x4000},  // L
    {kRtrWrite, true, 0x8000},  // A
    {kRtrRead, true, 0x4000},   // B
}};

// RFC 6581 §9.1's four bytes.
struct IrdOrd {
    std::uint16_t ird = 0;  // 14 bits
    std::uint16_t ord = 0;  // 14 bits
    bool peer_to_peer = false;
    std::uint8_t rtr = 0;  // kRtr* bits: offered (request) or chosen (reply)

    friend bool operator==(const IrdOrd&, const IrdOrd&) = default;
};

void write_ird_ord(std::span<std::uint8_t, kMpaIrdOrdLen> out, const IrdOrd& v) noexcept;
IrdOrd read_ird_ord(std::span<const std::uint8_t, kMpaIrdOrdLen> in) noexcept;

enum class FrameKind : std::uint8_t { request, reply };

// What decoding a frame, or negotiating over one, can end in. The names are counter names.
enum class MpaError : std::uint8_t {
    none,
    truncated,          // fewer bytes than the frame's header and PD_Length say (wait for more)
    bad_key,            // not the key expected here
    bad_revision,       // not 1 or 2, or a reply of a higher revision than the request's
    pd_too_long,        // PD_Length above 512
    missing_ird_ord,    // revision 2: the enhanced flag with under 4 bytes of private data, or
                        // a reply without the header the request carried
    markers_requested,  // the peer wants markers: snic does not send them
    crc_refused,        // the peer set C and our policy is CrcPolicy::refuse
    insufficient_ird,   // initiator: the responder's ORD exceeds the IRD we can give
    no_matching_rtr,    // peer-to-peer without an RTR kind both sides take
    bad_argument,       // accept/reject/construction: IRD/ORD above 14 bits, PD too long
    wrong_state,        // accept/reject when no request waits for an answer
    count_
};

inline constexpr std::array<std::string_view, static_cast<std::size_t>(MpaError::count_)>
    kMpaErrorNames = {
        "mpa_ok",
        "mpa_truncated",
        "mpa_bad_key",
        "mpa_bad_revision",
        "mpa_pd_too_long",
        "mpa_missing_ird_ord",
        "mpa_markers_requested",
        "mpa_crc_refused",
        "mpa_insufficient_ird",
        "mpa_no_matching_rtr",
        "mpa_bad_argument",
        "mpa_wrong_state",
};

constexpr std::string_view mpa_error_name(MpaError e) {
    return kMpaErrorNames[static_cast<std::size_t>(e)];
}

// A frame's fields. Decoded: views into the bytes given to decode_frame(). Encoded: what
// encode_frame() writes.
struct MpaFrame {
    FrameKind kind = FrameKind::request;
    bool markers = false;
    bool crc = false;
    bool reject = false;
    std::uint8_t revision = 2;
    // Revision 2 with the IRD/ORD header (the enhanced flag). encode_frame() writes the
    // header and the flag when set, whatever the revision says.
    bool enhanced = false;
    IrdOrd ird_ord;
    std::span<const std::uint8_t> private_data;  // the consumer's, after any IRD/ORD header
    std::size_t length = 0;                      // decoded: of the whole frame

    // PD_Length: the consumer's private data plus the IRD/ORD header.
    std::size_t pd_length() const { return private_data.size() + (enhanced ? kMpaIrdOrdLen : 0); }
};

struct MpaDecoded {
    MpaError error = MpaError::none;
    MpaFrame frame;  // meaningful when error is none
};

// Decodes the frame `bytes` start with (more may follow: frame.length says where it ends).
// `kind` is the key expected. A frame with the reject flag whose private data is too short
// for the IRD/ORD header is taken without one (a reject needs none).
MpaDecoded decode_frame(std::span<const std::uint8_t> bytes, FrameKind kind) noexcept;

// Writes `f` (kind, flags, revision, the IRD/ORD header when enhanced, private data).
// Returns its length, or 0 when `out` is too small or PD_Length would pass 512.
std::size_t encode_frame(std::span<std::uint8_t> out, const MpaFrame& f) noexcept;

// --- negotiation (RFC 5044 §7.1, RFC 6581 §9.2) ------------------------------------------

// Our CRC wish. The C flag of either side turns CRCs on for both (RFC 5044 §7.1.1), so a
// "preferred" CRC is a required one: setting C forces it.
enum class CrcPolicy : std::uint8_t {
    require,  // set C: CRCs on
    accept,   // leave C clear, use CRCs when the peer sets C
    refuse,   // leave C clear and refuse a peer that sets C (siw's mpa_crc_strict)
};

struct MpaConfig {
    std::uint8_t revision = 2;  // the highest we speak, 1 or 2
    CrcPolicy crc = CrcPolicy::require;
    // Initiator: the IRD and ORD we ask for. The responder's come with accept().
    std::uint16_t ird = 0;
    std::uint16_t ord = 0;
    // The IRD we can grow to when the peer's ORD asks for more than ours (siw's relaxed IRD
    // negotiation): the initiator's on the reply's ORD, the responder's (accept's `ird`) on
    // the request's ORD; below `ird` it counts as `ird`.
    std::uint16_t max_ird = 0;
    // Initiator: ask for peer-to-peer mode, offering `rtr`. Responder: take it, choosing
    // from `rtr` (Write first, as siw does, then Read, then Send).
    bool peer_to_peer = false;
    std::uint8_t rtr = kRtrWrite | kRtrRead;
};

enum class MpaState : std::uint8_t {
    awaiting_frame,    // bytes of the peer's frame still to come
    request_received,  // responder: accept() or reject() now
    established,       // result() holds what was agreed; send FPDUs
    rejected,          // a reject was sent (responder) or received (initiator)
    failed,            // error() says why; reply() may hold a reject to send before closing
};

// What the two frames agreed.
struct MpaResult {
    std::uint8_t revision = 0;
    bool crc = false;
    std::uint16_t ird = 0;  // ours, after negotiation (revision 1: as configured)
    std::uint16_t ord = 0;
    // Peer-to-peer: the RTR the initiator sends first and the responder waits for.
    Rtr rtr = Rtr::none;
    // The peer's private data (after its IRD/ORD header), also that of a reject received.
    // Valid while the negotiator lives.
    std::span<const std::uint8_t> peer_private_data;
};

// Collects one frame from stream bytes of any split, in a buffer of the largest frame.
class FrameReader {
  public:
    explicit FrameReader(FrameKind kind) : kind_(kind) {}
    // Takes bytes up to the frame's end. Returns how many it took; done() or error() after.
    std::size_t feed(std::span<const std::uint8_t> in) noexcept;
    // truncated while the frame is incomplete, none once it is whole, else why it is bad.
    MpaError status() const { return decoded_.error; }
    const MpaFrame& frame() const { return decoded_.frame; }

  private:
    FrameKind kind_;
    std::array<std::uint8_t, kMpaMaxFrameLen> buf_{};
    std::size_t have_ = 0;
    MpaDecoded decoded_{MpaError::truncated, {}};
};

// The side that opened TCP.
class MpaInitiator {
  public:
    // Builds the request. A bad config (revision, IRD/ORD past 14 bits, private data past
    // 512 bytes with the header) leaves the state failed with bad_argument.
    MpaInitiator(const MpaConfig& config, std::span<const std::uint8_t> private_data);

    std::span<const std::uint8_t> request() const { return {out_.data(), out_len_}; }
    // Peer bytes in stream order. Returns how many were the reply's; the rest are FPDUs.
    std::size_t on_bytes(std::span<const std::uint8_t> in) noexcept;

    MpaState state() const { return state_; }
    MpaError error() const { return error_; }
    const MpaResult& result() const { return result_; }
    const MpaFrame& sent() const { return sent_; }

  private:
    void on_reply(const MpaFrame& rep) noexcept;
    void fail(MpaError e) noexcept;

    MpaConfig config_;
    MpaFrame sent_;
    std::array<std::uint8_t, kMpaMaxFrameLen> out_{};
    std::size_t out_len_ = 0;
    FrameReader reader_{FrameKind::reply};
    MpaState state_ = MpaState::awaiting_frame;
    MpaError error_ = MpaError::none;
    MpaResult result_;
};

// The side that took the TCP connection.
class MpaResponder {
  public:
    explicit MpaResponder(const MpaConfig& config);

    // Peer bytes in stream order. Returns how many were the request's. A request snic cannot
    // serve (markers, a CRC refused, no IRD/ORD header) fails at once with a reject in
    // reply(), as siw does; one it can waits in request_received.
    std::size_t on_bytes(std::span<const std::uint8_t> in) noexcept;
    // The peer's request, once received.
    const MpaFrame& request() const { return reader_.frame(); }
    // The initiator's ORD as its ULP asked it: an initiator offering a Read RTR raises an ORD
    // of 0 to 1 for the RTR's own read (as snic and siw do), so when accept() will take that
    // RTR an ORD of 1 stands for 0. (An ULP that asked for 1 is told 0, which costs it
    // nothing: accept() raises our IRD to the request's ORD anyway.)
    std::uint16_t ulp_ord() const noexcept;

    // rdma_accept: our private data, IRD and ORD. Revision 2: the ORD sent is at most the
    // initiator's IRD (RFC 6581 §9.2: the responder lowers), the IRD is ours raised to the
    // initiator's ORD as far as max_ird allows (siw_accept's relaxed negotiation; the
    // initiator lowers its ORD to what we could not give), and a Read RTR needs an IRD of 1
    // at least. Fails, with no
    // effect, on bad arguments, in the wrong state or with no RTR both sides take (then
    // reject()).
    MpaError accept(std::span<const std::uint8_t> private_data, std::uint16_t ird,
                    std::uint16_t ord) noexcept;
    // rdma_reject: a reply with R set and our private data.
    MpaError reject(std::span<const std::uint8_t> private_data) noexcept;
    // The reply to send: after accept() or reject(), or a refusal's when failed.
    std::span<const std::uint8_t> reply() const { return {out_.data(), out_len_}; }

    MpaState state() const { return state_; }
    MpaError error() const { return error_; }
    const MpaResult& result() const { return result_; }

  private:
    void on_request(const MpaFrame& req) noexcept;
    MpaFrame reply_base() const noexcept;
    Rtr choose_rtr() const noexcept;
    // Revision 2 with the IRD/ORD header both ways, and peer-to-peer asked for and served.
    bool p2p_granted() const noexcept;

    MpaConfig config_;
    FrameReader reader_{FrameKind::request};
    std::array<std::uint8_t, kMpaMaxFrameLen> out_{};
    std::size_t out_len_ = 0;
    MpaState state_ = MpaState::awaiting_frame;
    MpaError error_ = MpaError::none;
    MpaResult result_;
};

// --- FPDUs (RFC 5044 §4, §8; markers off) ------------------------------------------------

// ULPDU_Length, then the ULPDU, pad to 4 bytes counted from the FPDU's start, CRC-32C.
inline constexpr std::size_t kFpduLengthLen = 2;
inline constexpr std::size_t kFpduCrcLen = 4;
inline constexpr std::size_t kMaxUlpdu = 0xffff;

// The FPDU carrying `ulpdu_len` bytes.
constexpr std::size_t fpdu_size(std::size_t ulpdu_len) {
    return ((kFpduLengthLen + ulpdu_len + 3) & ~std::size_t{3}) + kFpduCrcLen;
}
// The largest ULPDU whose FPDU fits `mss` bytes (0 when none does).
constexpr std::size_t max_ulpdu(std::size_t mss) {
    if (mss < kFpduLengthLen + kFpduCrcLen + 2) return 0;
    const std::size_t u = ((mss - kFpduCrcLen) & ~std::size_t{3}) - kFpduLengthLen;
    return u < kMaxUlpdu ? u : kMaxUlpdu;  // u >= 65538 means mss >= fpdu_size(65535)
}

// Writes ULPDU_Length, the pad and the CRC (or zero when `crc` is off) around a ULPDU of
// `ulpdu_len` bytes already at out[2, 2 + ulpdu_len). Returns the FPDU length, or 0 when it
// does not fit or the ULPDU is longer than 65535.
std::size_t seal_fpdu(std::span<std::uint8_t> out, std::size_t ulpdu_len, bool crc) noexcept;

// For a sender that folds the CRC-32C over the ULPDU as it copies it in (crc::Crc32c::
// update_copy, one pass over the payload): writes ULPDU_Length (`ulpdu_len`) and returns the
// register over it and the ULPDU's first `head` bytes, already at out[2, 2 + head). The
// sender folds the rest of the ULPDU from there and ends with seal_fpdu_folded.
std::uint32_t begin_fpdu(std::span<std::uint8_t> out, std::size_t ulpdu_len,
                         std::size_t head) noexcept;
// seal_fpdu for such an FPDU: `reg` is the register after the whole ULPDU; writes the pad and
// folds it, then the CRC. Returns the FPDU length, or 0 as seal_fpdu does.
std::size_t seal_fpdu_folded(std::span<std::uint8_t> out, std::size_t ulpdu_len,
                             std::uint32_t reg) noexcept;

// Builds the FPDU of the ULPDU `header` + `payload` in `out`. A piece already in its place
// (header at out[2], payload right after it) is not copied, so an engine that wrote it there
// pays for no copy. Returns the FPDU length, or 0 as seal_fpdu does.
std::size_t write_fpdu(std::span<std::uint8_t> out, std::span<const std::uint8_t> header,
                       std::span<const std::uint8_t> payload, bool crc) noexcept;

// The CRC-32C check of one FPDU, made by its reader as it copies the payload to its place:
// each byte is read once, by the copy that folds it (crc::Crc32c::update_copy), as RoCE's
// receive path folds the ICRC. place() takes pieces of the FPDU in ascending order and
// folds the bytes between them; verify() folds the rest and compares, once. A default one
// has nothing to check: place() copies and verify() is true.
class FpduCrcFold {
  public:
    FpduCrcFold() = default;
    // `fpdu`: the whole FPDU, ULPDU_Length through CRC, whose CRC is unchecked.
    explicit FpduCrcFold(std::span<const std::uint8_t> fpdu) noexcept
        : fpdu_(fpdu), at_(fpdu.data()) {}

    bool pending() const { return !fpdu_.empty() && !done_; }
    // Copies `src` (bytes of the FPDU) to dst, folding them when they come after what was
    // folded so far.
    void place(std::uint8_t* dst, std::span<const std::uint8_t> src) noexcept;
    // Whether the FPDU's CRC is right; the first call folds what place() did not.
    bool verify() noexcept;

  private:
    std::span<const std::uint8_t> fpdu_;
    const std::uint8_t* at_ = nullptr;  // folded up to here
    std::uint32_t reg_ = 0xffffffff;
    bool done_ = false;
    bool good_ = true;
};

// Splits in-order stream bytes into FPDUs and checks their CRCs. An FPDU inside one input
// chunk is yielded in place; one that straddles chunks is gathered in a buffer of one
// FPDU's size, the only copy. A CRC mismatch or a ULPDU_Length past the limit is fatal
// (RFC 5044 §8: close the connection) and sticks. A reader that folds the CRC as it places
// (set_fold) is given the FPDUs of at least crc::kCopyFoldMin bytes of ULPDU unchecked, to
// check with an FpduCrcFold before it acts on them.
class FpduDeframer {
  public:
    enum class Status : std::uint8_t {
        fpdu,       // `ulpdu` holds one, valid until the next call
        need_more,  // all of the input is taken; feed more
        crc_error,  // fatal
        too_long,   // fatal: ULPDU_Length above max_ulpdu
    };
    struct Step {
        Status status = Status::need_more;
        std::size_t consumed = 0;  // bytes of the input taken
        std::span<const std::uint8_t> ulpdu;
        // With set_fold: the whole FPDU when its CRC is left to the reader, else empty.
        std::span<const std::uint8_t> unchecked;
    };

    // `max_ulpdu` bounds the ULPDU_Length taken (at most 65535); `crc` checks CRCs.
    FpduDeframer(std::size_t max_ulpdu, bool crc);

    // The next FPDU from what is buffered and `in`.
    Step next(std::span<const std::uint8_t> in) noexcept;

    // Feeds all of `in`, calling on_ulpdu(ulpdu) for each FPDU, or on_ulpdu(ulpdu,
    // unchecked) when it takes two spans. Returns need_more when all was taken, else the
    // fatal status.
    template <typename F>
    Status feed(std::span<const std::uint8_t> in, F&& on_ulpdu) {
        using Bytes = std::span<const std::uint8_t>;
        while (true) {
            const Step s = next(in);
            in = in.subspan(s.consumed);
            if (s.status != Status::fpdu) return s.status;
            if constexpr (std::is_invocable_v<F, Bytes, Bytes>) {
                on_ulpdu(s.ulpdu, s.unchecked);
            } else {
                on_ulpdu(s.ulpdu);
            }
        }
    }

    // Leaves the CRC of large FPDUs to the reader (Step::unchecked), who folds it.
    void set_fold(bool on) { fold_ = on; }

    bool crc() const { return crc_; }
    std::size_t buffered() const { return held_; }
    std::uint64_t fpdus() const { return fpdus_; }

  private:
    Status check(std::span<const std::uint8_t> fpdu, Step& s) noexcept;

    std::size_t max_ulpdu_;
    bool crc_;
    bool fold_ = false;
    // Sized once, fpdu_size(max_ulpdu), and not written until an FPDU straddles segments: an
    // idle connection's pages are not taken (thousands of connections, docs/SECURITY.md).
    std::unique_ptr<std::uint8_t[]> mem_;
    std::span<std::uint8_t> buf_;
    std::size_t held_ = 0;  // bytes of a straddling FPDU in buf_
    std::size_t want_ = 0;  // its whole size, once its length is known
    Status fatal_ = Status::need_more;
    std::uint64_t fpdus_ = 0;
};

}  // namespace snic::iwarp
