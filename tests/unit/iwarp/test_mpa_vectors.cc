// MPA (proto/iwarp/mpa.h) against real soft-iWARP traffic (tests/vectors/README.md): the
// MPA request and reply siw sent, revision 2 with CRCs (siw_real_crc.pcap) and revision 1
// (siw_real_crc_mpav1.pcap), decoded by snic and produced again by snic's negotiator; then
// every FPDU after them through snic's deframer, whole, at siw's segment boundaries and cut
// at random points, and once with a byte flipped; and every ULPDU through ddp.h's parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "proto/iwarp/ddp.h"
#include "proto/iwarp/mpa.h"
#include "tests/unit/pcap.h"
#include "tests/unit/tcp_streams.h"

namespace snic::iwarp {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes bytes_of(std::span<const std::uint8_t> s) {
    return {s.begin(), s.end()};
}

// One iWARP connection of a capture: the initiator's stream (MPA request, FPDUs) and the
// responder's (MPA reply, FPDUs), with the TCP segments of each.
struct Connection {
    test::Direction forward;  // initiator -> responder
    Bytes request_stream;
    Bytes reply_stream;
    std::vector<test::Segment> request_segments;
    std::vector<test::Segment> reply_segments;
};

struct Capture {
    test::Pcap pcap;  // owns the bytes the segments point into
    std::vector<Connection> connections;
};

bool starts_with_request(const Bytes& s) {
    return s.size() >= kMpaKeyLen && std::equal(kMpaRequestKey.begin(), kMpaRequestKey.end(),
                                                reinterpret_cast<const char*>(s.data()));
}

void load(const char* name, Capture& c) {
    ASSERT_TRUE(test::read_pcap(test::vector_path(name), c.pcap));
    const auto directions = test::tcp_segments(c.pcap);
    for (const auto& [dir, half] : directions) {
        Bytes stream;
        ASSERT_TRUE(test::reassemble(half, stream));
        if (!starts_with_request(stream)) continue;
        const auto back = directions.find(dir.reversed());
        ASSERT_NE(back, directions.end());
        Connection conn;
        conn.forward = dir;
        conn.request_stream = std::move(stream);
        ASSERT_TRUE(test::reassemble(back->second, conn.reply_stream));
        conn.request_segments = half.segments;
        conn.reply_segments = back->second.segments;
        c.connections.push_back(std::move(conn));
    }
}

std::string name_of(const Connection& c) {
    return "TCP port " + std::to_string(c.forward.sport) + " -> " + std::to_string(c.forward.dport);
}

// --- the MPA frames siw sent -------------------------------------------------------------

// siw (rping, perftest): C set, M and R clear, revision 2 with RFC 6581's enhanced flag and
// IRD/ORD header and no consumer private data, no peer-to-peer; the reply echoes the
// request's IRD and ORD: 1/1 for rping, 0/0 for send_bw and write_bw, 128/128 for read_bw.
TEST(MpaVectors, siw_revision_2_request_and_reply_decode_as_sent) {
    Capture cap;
    load("siw_real_crc.pcap", cap);
    ASSERT_EQ(cap.connections.size(), 7u);
    std::map<std::pair<int, int>, int> ird_ord;
    for (const Connection& c : cap.connections) {
        SCOPED_TRACE(name_of(c));
        const MpaDecoded req = decode_frame(c.request_stream, FrameKind::request);
        const MpaDecoded rep = decode_frame(c.reply_stream, FrameKind::reply);
        ASSERT_EQ(req.error, MpaError::none);
        ASSERT_EQ(rep.error, MpaError::none);
        for (const MpaFrame* f : {&req.frame, &rep.frame}) {
            EXPECT_EQ(f->revision, 2);
            EXPECT_TRUE(f->crc);
            EXPECT_FALSE(f->markers);
            EXPECT_FALSE(f->reject);
            EXPECT_TRUE(f->enhanced);
            EXPECT_EQ(f->pd_length(), 4u);
            EXPECT_TRUE(f->private_data.empty());
            EXPECT_FALSE(f->ird_ord.peer_to_peer);
            EXPECT_EQ(f->ird_ord.rtr, 0);
            EXPECT_EQ(f->length, 24u);
        }
        EXPECT_EQ(c.request_stream[16], 0x50);  // C | enhanced, no siw GSO bit
        EXPECT_EQ(rep.frame.ird_ord, req.frame.ird_ord);
        ++ird_ord[{req.frame.ird_ord.ird, req.frame.ird_ord.ord}];
    }
    const std::map<std::pair<int, int>, int> expect = {{{0, 0}, 5}, {{1, 1}, 1}, {{128, 128}, 1}};
    EXPECT_EQ(ird_ord, expect);
}

TEST(MpaVectors, siw_revision_1_request_and_reply_decode_as_sent) {
    Capture cap;
    load("siw_real_crc_mpav1.pcap", cap);
    ASSERT_EQ(cap.connections.size(), 7u);
    for (const Connection& c : cap.connections) {
        SCOPED_TRACE(name_of(c));
        const MpaDecoded req = decode_frame(c.request_stream, FrameKind::request);
        const MpaDecoded rep = decode_frame(c.reply_stream, FrameKind::reply);
        ASSERT_EQ(req.error, MpaError::none);
        ASSERT_EQ(rep.error, MpaError::none);
        for (const MpaFrame* f : {&req.frame, &rep.frame}) {
            EXPECT_EQ(f->revision, 1);
            EXPECT_TRUE(f->crc);
            EXPECT_FALSE(f->markers);
            EXPECT_FALSE(f->reject);
            EXPECT_FALSE(f->enhanced);
            EXPECT_EQ(f->pd_length(), 0u);
            EXPECT_EQ(f->length, 20u);
        }
        EXPECT_EQ(c.request_stream[16], 0x40);
    }
}

// snic in siw's place on either side: the same frames byte for byte, the same outcome.
void negotiate_as_siw(const char* name) {
    Capture cap;
    load(name, cap);
    ASSERT_FALSE(cap.connections.empty());
    for (const Connection& c : cap.connections) {
        SCOPED_TRACE(name_of(c));
        const MpaFrame siw_req = decode_frame(c.request_stream, FrameKind::request).frame;
        const MpaFrame siw_rep = decode_frame(c.reply_stream, FrameKind::reply).frame;

        MpaConfig ic;
        ic.revision = siw_req.revision;
        ic.crc = CrcPolicy::require;
        ic.ird = siw_req.ird_ord.ird;
        ic.ord = siw_req.ird_ord.ord;
        MpaInitiator i(ic, {});
        EXPECT_EQ(bytes_of(i.request()),
                  Bytes(c.request_stream.begin(), c.request_stream.begin() + siw_req.length));
        // siw's whole reply stream: MPA takes the reply and leaves the FPDUs.
        EXPECT_EQ(i.on_bytes(c.reply_stream), siw_rep.length);
        ASSERT_EQ(i.state(), MpaState::established);
        EXPECT_TRUE(i.result().crc);
        EXPECT_EQ(i.result().revision, siw_req.revision);
        EXPECT_EQ(i.result().ird, siw_rep.ird_ord.ord);
        EXPECT_EQ(i.result().ord, siw_rep.ird_ord.ird);
        EXPECT_EQ(i.result().rtr, Rtr::none);

        MpaConfig rc;
        rc.crc = CrcPolicy::accept;
        MpaResponder r(rc);
        EXPECT_EQ(r.on_bytes(c.request_stream), siw_req.length);
        ASSERT_EQ(r.state(), MpaState::request_received);
        // The user's IRD mirrors the initiator's ORD and its ORD the initiator's IRD.
        ASSERT_EQ(r.accept({}, siw_req.ird_ord.ord, siw_req.ird_ord.ird), MpaError::none);
        EXPECT_EQ(bytes_of(r.reply()),
                  Bytes(c.reply_stream.begin(), c.reply_stream.begin() + siw_rep.length));
        EXPECT_TRUE(r.result().crc);
    }
}

TEST(MpaVectors, snic_sends_the_frames_siw_sent_revision_2) {
    negotiate_as_siw("siw_real_crc.pcap");
}

TEST(MpaVectors, snic_sends_the_frames_siw_sent_revision_1) {
    negotiate_as_siw("siw_real_crc_mpav1.pcap");
}

// --- the FPDUs after them ----------------------------------------------------------------

struct Deframed {
    std::vector<Bytes> ulpdus;
    std::size_t in_place = 0;  // yielded without a copy
    FpduDeframer::Status status = FpduDeframer::Status::need_more;
};

// Deframes `chunks` in order (CRCs on, 64 KiB limit).
Deframed deframe(const std::vector<std::span<const std::uint8_t>>& chunks) {
    Deframed out;
    FpduDeframer d(kMaxUlpdu, true);
    for (std::span<const std::uint8_t> in : chunks) {
        while (true) {
            const auto step = d.next(in);
            if (step.status != FpduDeframer::Status::fpdu) {
                out.status = step.status;
                EXPECT_EQ(step.consumed, in.size());
                break;
            }
            if (step.ulpdu.data() >= in.data() && step.ulpdu.data() < in.data() + in.size()) {
                ++out.in_place;
            }
            out.ulpdus.push_back(bytes_of(step.ulpdu));
            in = in.subspan(step.consumed);
        }
        if (out.status != FpduDeframer::Status::need_more) break;
    }
    EXPECT_EQ(d.buffered(), 0u) << "a cut FPDU at the end of the stream";
    return out;
}

// The stream after its MPA frame, cut where siw's TCP segments ended.
std::vector<std::span<const std::uint8_t>> by_segment(const Bytes& stream,
                                                      const std::vector<test::Segment>& segs,
                                                      std::size_t frame_len) {
    // Segments in capture order are in stream order in these captures (no retransmission);
    // each chunk is taken from the reassembled stream, past the MPA frame.
    std::vector<std::span<const std::uint8_t>> chunks;
    std::size_t at = 0;
    for (const test::Segment& s : segs) {
        const std::size_t begin = at, end = at + s.data.size();
        at = end;
        if (end <= frame_len) continue;
        const std::size_t from = std::max(begin, frame_len);
        chunks.push_back(std::span(stream).subspan(from, end - from));
    }
    EXPECT_EQ(at, stream.size());
    return chunks;
}

void deframe_capture(const char* name, std::size_t expect_fpdus) {
    Capture cap;
    load(name, cap);
    std::mt19937 rng(5044);
    std::size_t total = 0, whole_in_segments = 0, lone_crcs = 0;
    for (const Connection& c : cap.connections) {
        for (bool forward : {true, false}) {
            SCOPED_TRACE(name_of(c) + (forward ? " request side" : " reply side"));
            const Bytes& stream = forward ? c.request_stream : c.reply_stream;
            const std::size_t frame_len =
                decode_frame(stream, forward ? FrameKind::request : FrameKind::reply).frame.length;
            ASSERT_GT(frame_len, 0u);
            const std::span<const std::uint8_t> fpdus = std::span(stream).subspan(frame_len);

            // All at once: every FPDU in place, every CRC good.
            const Deframed whole = deframe({fpdus});
            EXPECT_EQ(whole.status, FpduDeframer::Status::need_more);
            EXPECT_EQ(whole.in_place, whole.ulpdus.size());
            total += whole.ulpdus.size();

            // siw's own segments.
            const auto chunks =
                by_segment(stream, forward ? c.request_segments : c.reply_segments, frame_len);
            const Deframed segs = deframe(chunks);
            EXPECT_EQ(segs.ulpdus, whole.ulpdus);
            whole_in_segments += segs.in_place;
            for (const auto& chunk : chunks) lone_crcs += chunk.size() == kFpduCrcLen;

            // Random cuts, a few times over.
            for (int round = 0; round < 5; ++round) {
                std::vector<std::span<const std::uint8_t>> chunks;
                for (std::size_t at = 0; at < fpdus.size();) {
                    const std::size_t n = std::min<std::size_t>(
                        fpdus.size() - at, 1 + rng() % (round < 2 ? 64 : 4000));
                    chunks.push_back(fpdus.subspan(at, n));
                    at += n;
                }
                const Deframed cut = deframe(chunks);
                EXPECT_EQ(cut.status, FpduDeframer::Status::need_more);
                ASSERT_EQ(cut.ulpdus, whole.ulpdus) << "round " << round;
            }
        }
    }
    EXPECT_EQ(total, expect_fpdus);
    // siw starts every segment with an FPDU (RFC 5044 §8.1.2), but now and then sends an
    // FPDU's CRC in a 4-byte segment of its own (its transmit path writes the trailer apart);
    // those FPDUs, and only those, are gathered in the deframer's buffer.
    EXPECT_GT(lone_crcs, 0u);
    EXPECT_EQ(whole_in_segments + lone_crcs, expect_fpdus);
}

TEST(MpaVectors, every_fpdu_of_siw_revision_2_deframes_with_a_good_crc) {
    // 311, as Wireshark 4.0's iwarp_mpa dissector counts "Good CRC32".
    deframe_capture("siw_real_crc.pcap", 311);
}

TEST(MpaVectors, every_fpdu_of_siw_revision_1_deframes_with_a_good_crc) {
    deframe_capture("siw_real_crc_mpav1.pcap", 291);
}

TEST(MpaVectors, a_flipped_byte_in_siw_traffic_is_a_crc_error) {
    Capture cap;
    load("siw_real_crc.pcap", cap);
    std::mt19937 rng(7);
    for (const Connection& c : cap.connections) {
        SCOPED_TRACE(name_of(c));
        const std::size_t frame_len =
            decode_frame(c.request_stream, FrameKind::request).frame.length;
        Bytes bad(c.request_stream.begin() + static_cast<std::ptrdiff_t>(frame_len),
                  c.request_stream.end());
        ASSERT_GT(bad.size(), 8u);
        // A byte past the first ULPDU_Length, inside the first FPDU: its CRC must catch it.
        const std::size_t first = fpdu_size(static_cast<std::size_t>(bad[0] << 8 | bad[1]));
        const std::size_t at = 2 + rng() % (first - 2);
        bad[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        FpduDeframer d(kMaxUlpdu, true);
        EXPECT_EQ(d.next(bad).status, FpduDeframer::Status::crc_error) << "byte " << at;
        FpduDeframer off(kMaxUlpdu, false);  // with CRCs off the same FPDU passes
        EXPECT_EQ(off.next(bad).status, FpduDeframer::Status::fpdu);
    }
}

// --- DDP/RDMAP inside them (ddp.h) -------------------------------------------------------

// Every ULPDU the deframer yields parses as a DDP segment; the opcodes seen, by capture.
std::map<RdmapOp, std::size_t> ddp_census(const char* name, std::size_t expect_fpdus) {
    Capture cap;
    load(name, cap);
    std::map<RdmapOp, std::size_t> ops;
    std::size_t total = 0;
    for (const Connection& c : cap.connections) {
        for (bool forward : {true, false}) {
            SCOPED_TRACE(name_of(c) + (forward ? " request side" : " reply side"));
            const Bytes& stream = forward ? c.request_stream : c.reply_stream;
            const std::size_t frame_len =
                decode_frame(stream, forward ? FrameKind::request : FrameKind::reply).frame.length;
            FpduDeframer d(kMaxUlpdu, true);
            const auto status = d.feed(
                std::span(stream).subspan(frame_len), [&](std::span<const std::uint8_t> ulpdu) {
                    const iwarp::Segment seg = parse(ulpdu);
                    EXPECT_TRUE(seg.ok())
                        << parse_error_name(seg.error) << " at FPDU " << d.fpdus();
                    if (seg.ok()) ++ops[seg.op];
                    ++total;
                });
            EXPECT_EQ(status, FpduDeframer::Status::need_more);
        }
    }
    EXPECT_EQ(total, expect_fpdus);
    for (RdmapOp op :
         {RdmapOp::send, RdmapOp::write, RdmapOp::read_request, RdmapOp::read_response}) {
        EXPECT_GT(ops[op], 0u) << op_info(op).name;
    }
    return ops;
}

// rping and perftest's send_bw, write_bw and read_bw: Sends, RDMA Writes, Read Requests and
// their Read Responses, nothing else (no Terminate: every connection closed cleanly).
TEST(MpaVectors, every_ulpdu_of_siw_revision_2_is_a_ddp_segment) {
    const std::map<RdmapOp, std::size_t> expect = {{RdmapOp::write, 67},
                                                   {RdmapOp::read_request, 23},
                                                   {RdmapOp::read_response, 63},
                                                   {RdmapOp::send, 158}};
    EXPECT_EQ(ddp_census("siw_real_crc.pcap", 311), expect);
}

TEST(MpaVectors, every_ulpdu_of_siw_revision_1_is_a_ddp_segment) {
    const std::map<RdmapOp, std::size_t> expect = {{RdmapOp::write, 64},
                                                   {RdmapOp::read_request, 20},
                                                   {RdmapOp::read_response, 60},
                                                   {RdmapOp::send, 147}};
    EXPECT_EQ(ddp_census("siw_real_crc_mpav1.pcap", 291), expect);
}

}  // namespace
}  // namespace snic::iwarp
