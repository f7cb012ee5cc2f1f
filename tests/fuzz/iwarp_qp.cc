// libFuzzer target: one iWARP QP (proto/iwarp/qp.h: requester, responder, completer) fed its
// peer's stream by the fuzzer: DDP segments built from chosen fields (every RDMAP opcode,
// keys of the fake memory and addresses near their regions, MSNs and offsets near what the QP
// expects) framed as FPDUs, or raw stream bytes (the deframer's lengths and CRCs), cut at any
// point; receive and send WRs; polls; the stream refusing; to_error and the stream's end.
// After every engine call: the memory changed only where the engine was granted write access
// (GuardedMemory), every completion is of a WR outstanding, in order, within its buffers
// (CheckedQueues), and every FPDU the QP sent fits the MSS, has a good CRC and parses.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "proto/iwarp/ddp.h"
#include "proto/iwarp/mpa.h"
#include "proto/iwarp/qp.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/work_requests.h"

namespace snic::fuzz {
namespace {

// The stream: takes or refuses FPDUs as the input says, and checks each one taken.
class Stream final : public iwarp::IwStream {
  public:
    Stream(std::uint32_t mss, bool crc) : mss_(mss), deframer_(iwarp::kMaxUlpdu, crc) {}

    bool send(std::span<const std::uint8_t> fpdu) override {
        SNIC_FUZZ_REQUIRE(!fpdu.empty() && fpdu.size() <= mss_);
        if (refuse_) return false;
        // Exactly one whole FPDU, with a good CRC, whose ULPDU parses.
        const auto step = deframer_.next(fpdu);
        SNIC_FUZZ_REQUIRE(step.status == iwarp::FpduDeframer::Status::fpdu);
        SNIC_FUZZ_REQUIRE(step.consumed == fpdu.size());
        SNIC_FUZZ_REQUIRE(iwarp::parse(step.ulpdu).ok());
        ++sent;
        return true;
    }

    void set_mss(std::uint32_t mss) { mss_ = mss; }
    bool refuse_ = false;
    std::uint64_t sent = 0;

  private:
    std::uint32_t mss_;
    iwarp::FpduDeframer deframer_;
};

constexpr std::array<iwarp::RdmapOp, 12> kOps = {
    iwarp::RdmapOp::write,        iwarp::RdmapOp::read_request,   iwarp::RdmapOp::read_response,
    iwarp::RdmapOp::send,         iwarp::RdmapOp::send_inv,       iwarp::RdmapOp::send_se,
    iwarp::RdmapOp::send_se_inv,  iwarp::RdmapOp::terminate,      iwarp::RdmapOp::immediate,
    iwarp::RdmapOp::immediate_se, iwarp::RdmapOp::atomic_request, iwarp::RdmapOp::atomic_response,
};

class IwDriver {
  public:
    explicit IwDriver(Input& in) {
        cfg_.qpn = 0x11;
        cfg_.crc = (in.u8() & 1) != 0;
        cfg_.mss = 96 + in.u16() % 9000;
        cfg_.ird = 1 + in.u8() % 8;
        cfg_.ord = 1 + in.u8() % 8;
        cfg_.remote_access = in.u8() & (kAll & ~verbs::access::local_write);
        cfg_.sq_depth = 16;
        const std::uint8_t rtr = in.u8();
        cfg_.rtr_expect = static_cast<iwarp::Rtr>(rtr % 4);
        cfg_.rtr_send = static_cast<iwarp::Rtr>((rtr >> 2) % 4);
        add_regions(mem_);
        stream_ = std::make_unique<Stream>(cfg_.mss, cfg_.crc);
        qp_ = std::make_unique<iwarp::IwQp>(cfg_, mem_, queues_, *stream_);
    }

    void run(Input& in) {
        for (int step = 0; step < 256 && !in.empty(); ++step) {
            switch (in.u8() % 8) {
                case 0:
                case 1:
                    deliver_built(in);
                    break;
                case 2:
                    deliver_raw(in);
                    break;
                case 3:
                    queues_.post_recv(recv_wr(in, next_wr_id_++));
                    break;
                case 4:
                    queues_.post_send(send_wr(in, next_wr_id_++));
                    break;
                case 5:
                    stream_->refuse_ = (in.u8() & 3) == 0;
                    poll();
                    break;
                case 6: {
                    const std::uint32_t mss = 96 + in.u16() % 9000;
                    stream_->set_mss(mss);
                    call([&] { qp_->set_mss(mss); });
                    break;
                }
                case 7: {
                    const std::uint8_t how = in.u8();
                    if (how == 0xEE) call([&] { qp_->to_error(); });
                    if (how == 0xED) call([&] { qp_->on_stream_end((in.u8() & 1) != 0); });
                    poll();
                    break;
                }
            }
        }
        stream_->refuse_ = false;
        for (int i = 0; i < 64; ++i)
            if (!poll()) break;
    }

  private:
    template <typename F>
    void call(F&& f) {
        mem_.begin();
        f();
        mem_.check();
    }
    bool poll() {
        bool did = false;
        call([&] { did = qp_->poll(now_); });
        return did;
    }
    // Stream bytes to the QP, cut where the input says; the rest at once when the input has
    // run out (not byte by byte: a 64 KiB FPDU would take 65,536 engine calls, each checked).
    void deliver(std::span<const std::uint8_t> bytes, Input& in) {
        while (!bytes.empty()) {
            const std::size_t n = in.empty() ? bytes.size() : 1 + in.u16() % bytes.size();
            call([&] { qp_->on_bytes(bytes.first(n), now_); });
            bytes = bytes.subspan(n);
        }
    }

    void deliver_built(Input& in) {
        iwarp::SegmentSpec s;
        s.op = kOps[in.u8() % kOps.size()];
        const std::uint8_t flags = in.u8();
        s.last = (flags & 1) == 0;
        s.stag = pick_key(in);
        s.to = pick_addr(in, s.stag);
        s.inv_stag = pick_key(in);
        s.msn = (flags & 2) ? in.u32() : 1 + in.u8() % 4;  // near the start of each queue
        s.mo = (flags & 4) ? in.u32() : in.u16() % 4096;
        s.read.sink_stag = pick_key(in);
        s.read.sink_to = pick_addr(in, s.read.sink_stag);
        s.read.size = pick_len(in);
        s.read.src_stag = pick_key(in);
        s.read.src_to = pick_addr(in, s.read.src_stag);
        s.atomic.op = static_cast<iwarp::AtomicOp>(in.u8() % 3);
        s.atomic.request_id = in.u32();
        s.atomic.stag = pick_key(in);
        s.atomic.to =
            (flags & 8) ? pick_addr(in, s.atomic.stag) : pick_addr(in, s.atomic.stag) & ~7ull;
        s.atomic.swap_add = in.u64();
        s.atomic.swap_add_mask = in.u64();
        s.atomic.compare = in.u64();
        s.atomic.compare_mask = in.u64();
        s.atomic_resp.request_id = (flags & 16) ? in.u32() : 1 + in.u8() % 4;
        s.atomic_resp.orig = in.u64();
        s.cause.layer = static_cast<iwarp::TermLayer>(in.u8() % 3);
        s.cause.etype = in.u8() & 0xf;
        s.cause.code = in.u8();
        const std::uint8_t how = in.u8();
        const std::size_t payload = how < 64 ? cfg_.mss : how < 200 ? in.u8() : in.u16() % 9000;
        std::vector<std::uint8_t> ulpdu(iwarp::built_header_len(s) + payload, how);
        if (iwarp::build_header(ulpdu, s) == 0) return;
        std::vector<std::uint8_t> fpdu(iwarp::fpdu_size(ulpdu.size()));
        if (iwarp::write_fpdu(fpdu, ulpdu, {}, cfg_.crc) == 0) return;
        if (flags & 32) fpdu[2 + in.u16() % ulpdu.size()] ^= in.u8();  // a corrupt one
        deliver(fpdu, in);
    }

    // Raw stream bytes, optionally framed with a good length and CRC around them.
    void deliver_raw(Input& in) {
        const std::uint8_t how = in.u8();
        const std::span<const std::uint8_t> raw = in.bytes(in.u16() % 2048);
        if ((how & 1) == 0 || raw.empty()) {
            deliver(raw, in);
            return;
        }
        std::vector<std::uint8_t> fpdu(iwarp::fpdu_size(raw.size()));
        if (iwarp::write_fpdu(fpdu, raw, {}, cfg_.crc) == 0) return;
        deliver(fpdu, in);
    }

    iwarp::IwConfig cfg_;
    GuardedMemory mem_;
    CheckedQueues queues_{true};
    std::unique_ptr<Stream> stream_;
    std::unique_ptr<iwarp::IwQp> qp_;
    iwarp::IwTime now_ = 1'000'000;
    std::uint64_t next_wr_id_ = 1;
};

}  // namespace
}  // namespace snic::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    snic::fuzz::Input in(data, size);
    snic::fuzz::IwDriver d(in);
    d.run(in);
    return 0;
}
