// Drives one RC or UC QP (proto/roce/rc_qp.h: requester, completer and responder; UC's
// responder in uc.cc) from the fuzzer's bytes: packets built from chosen fields (every RC
// opcode, and every UC opcode for a UC QP, PSNs near the ones the QP
// expects, keys of the fake memory and addresses near their regions) or taken raw, receive
// and send WRs, time and polls. After every engine call it checks: the memory changed only
// where the engine was granted write access (GuardedMemory), every completion is of a WR
// outstanding, in order, within its buffers (CheckedQueues), and every packet the QP sent
// parses, goes to its peer QP and carries at most one MTU of payload (and, from a UC QP, is a
// UC request: UC never answers).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "proto/roce/packet.h"
#include "proto/roce/psn.h"
#include "proto/roce/rc.h"
#include "proto/roce/rc_qp.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/work_requests.h"

namespace snic::fuzz {

using roce::Opcode;

inline constexpr std::array<Opcode, 23> kRcOpcodes = {
    Opcode::rc_send_first,
    Opcode::rc_send_middle,
    Opcode::rc_send_last,
    Opcode::rc_send_last_with_immediate,
    Opcode::rc_send_only,
    Opcode::rc_send_only_with_immediate,
    Opcode::rc_rdma_write_first,
    Opcode::rc_rdma_write_middle,
    Opcode::rc_rdma_write_last,
    Opcode::rc_rdma_write_last_with_immediate,
    Opcode::rc_rdma_write_only,
    Opcode::rc_rdma_write_only_with_immediate,
    Opcode::rc_rdma_read_request,
    Opcode::rc_rdma_read_response_first,
    Opcode::rc_rdma_read_response_middle,
    Opcode::rc_rdma_read_response_last,
    Opcode::rc_rdma_read_response_only,
    Opcode::rc_acknowledge,
    Opcode::rc_atomic_acknowledge,
    Opcode::rc_compare_swap,
    Opcode::rc_fetch_add,
    Opcode::rc_send_last_with_invalidate,
    Opcode::rc_send_only_with_invalidate,
};

inline constexpr std::array<Opcode, 12> kUcOpcodes = {
    Opcode::uc_send_first,       Opcode::uc_send_middle,
    Opcode::uc_send_last,        Opcode::uc_send_last_with_immediate,
    Opcode::uc_send_only,        Opcode::uc_send_only_with_immediate,
    Opcode::uc_rdma_write_first, Opcode::uc_rdma_write_middle,
    Opcode::uc_rdma_write_last,  Opcode::uc_rdma_write_last_with_immediate,
    Opcode::uc_rdma_write_only,  Opcode::uc_rdma_write_only_with_immediate,
};

class RcDriver {
  public:
    explicit RcDriver(const roce::RcConfig& c) : cfg_(c) {
        add_regions(mem_);
        qp_ = std::make_unique<roce::RcQp>(cfg_, mem_, queues_, wire_);
    }

    // Runs the whole input.
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
                    post_recv(in);
                    break;
                case 4:
                    post_send(in);
                    break;
                case 5:
                    now_ += std::uint64_t{in.u16()} * 1000;
                    poll();
                    break;
                case 6: {
                    const roce::RcTime d = qp_->next_deadline();
                    if (d != roce::kRcNever && d > now_) now_ = d;
                    poll();
                    break;
                }
                case 7:
                    if (in.u8() == 0xEE) {
                        mem_.begin();
                        qp_->to_error();
                        after();
                    } else {
                        poll();
                    }
                    break;
            }
        }
        for (int i = 0; i < 64; ++i)
            if (!poll()) break;
    }

    // Puts 1..6 send WRs chosen by the input in flight before anything arrives, so that
    // responses find WRs to retire.
    void prime(Input& in) {
        const std::uint32_t n = 1 + in.u8() % 6;
        for (std::uint32_t i = 0; i < n; ++i) post_send(in);
        for (int i = 0; i < 8; ++i)
            if (!poll()) break;
    }

    roce::RcQp& qp() { return *qp_; }
    CheckedQueues& queues() { return queues_; }

  private:
    // A wire that parses every packet sent and checks who it is for and its size.
    class Wire final : public roce::RcWire {
      public:
        explicit Wire(const roce::RcConfig& c) : cfg_(c) {}
        std::span<std::uint8_t> tx_alloc(std::size_t len) override {
            SNIC_FUZZ_REQUIRE(len + roce::kIcrcLen <= buf_.size());
            return {buf_.data(), len};
        }
        void tx_send(std::size_t len, std::size_t hdr,
                     std::span<const roce::TxPiece> payload) override {
            SNIC_FUZZ_REQUIRE(len + roce::kIcrcLen <= buf_.size());
            SNIC_FUZZ_REQUIRE(roce::gather_payload({buf_.data(), len}, hdr, payload));
            std::memset(buf_.data() + len, 0, roce::kIcrcLen);
            const roce::Packet p = roce::parse({buf_.data(), len + roce::kIcrcLen});
            SNIC_FUZZ_REQUIRE(p.ok());
            SNIC_FUZZ_REQUIRE(p.bth().dest_qp.host() == cfg_.dest_qpn);
            SNIC_FUZZ_REQUIRE(p.payload.size() <= cfg_.mtu);
            if (cfg_.service == roce::Transport::uc)
                SNIC_FUZZ_REQUIRE(roce::transport_of(p.opcode()) == roce::Transport::uc &&
                                  p.info->has(roce::kRequest));
            ++sent;
        }
        std::uint64_t sent = 0;

      private:
        const roce::RcConfig& cfg_;
        std::array<std::uint8_t, 4096 + 256> buf_{};
    };

    // `pending`: handed over as the transport hands a payload whose ICRC the responder checks
    // while it copies it (Packet::icrc_pending; the ICRC here is the CRC-32 of the bytes
    // before it).
    void deliver(std::span<const std::uint8_t> bytes, bool pending = false) {
        roce::Packet p = roce::parse(bytes);
        if (!p.ok()) return;
        if (pending) {
            p.icrc_pending = true;
            p.icrc_reg = roce::crc32_update(roce::kCrc32Init, {bytes.data(), p.payload.data()});
        }
        mem_.begin();
        qp_->on_packet(p, now_);
        after();
    }
    bool poll() {
        mem_.begin();
        const bool did = qp_->poll(now_);
        after();
        return did;
    }
    void after() { mem_.check(); }

    // A PSN near one the QP expects: the responder's ePSN, the oldest unacknowledged, the
    // next to send.
    std::uint32_t pick_psn(Input& in) {
        const std::uint8_t how = in.u8();
        const std::int32_t delta = static_cast<std::int8_t>(in.u8());
        std::uint32_t base = how % 3 == 0   ? qp_->expected_psn()
                             : how % 3 == 1 ? qp_->unacked_psn()
                                            : qp_->next_psn();
        if (how >= 250) base = in.u32();
        return (base + static_cast<std::uint32_t>(delta)) & roce::kPsnMask;
    }

    void deliver_built(Input& in) {
        roce::PacketSpec s;
        // A UC QP mostly gets UC's opcodes, sometimes RC's (which it must drop).
        const std::uint8_t pick = in.u8();
        s.opcode = cfg_.service == roce::Transport::uc && pick < 224
                       ? kUcOpcodes[pick % kUcOpcodes.size()]
                       : kRcOpcodes[pick % kRcOpcodes.size()];
        const std::uint8_t flags = in.u8();
        s.solicited = flags & 1;
        s.ack_req = flags & 2;
        s.pkey = (flags & 4) ? in.u16() : roce::kDefaultPkey;
        s.dest_qp = (flags & 8) ? in.u32() & 0xffffff : cfg_.qpn;
        s.psn = pick_psn(in);
        const std::uint32_t rkey = pick_key(in);
        s.reth.va = pick_addr(in, rkey);
        s.reth.rkey = rkey;
        s.reth.dma_len = pick_len(in);
        s.atomic_eth.va = (flags & 16) ? pick_addr(in, rkey) : (pick_addr(in, rkey) & ~7ull);
        s.atomic_eth.rkey = rkey;
        s.atomic_eth.swap_add = in.u64();
        s.atomic_eth.compare = in.u64();
        s.aeth.syndrome = in.u8();
        s.aeth.msn = in.u32() & 0xffffff;
        s.atomic_ack_eth.orig = in.u64();
        s.immdt.imm = in.u32();
        s.ieth.rkey = pick_key(in);
        std::vector<std::uint8_t> payload;
        if (roce::opcode_info(s.opcode).has(roce::kHasPayload)) {
            const std::uint8_t how = in.u8();
            const std::size_t n = how < 64    ? cfg_.mtu
                                  : how < 200 ? in.u8()
                                              : in.u16() % (cfg_.mtu + 64);
            payload.assign(n, static_cast<std::uint8_t>(how));
        }
        s.payload = payload;
        std::vector<std::uint8_t> bytes(roce::transport_length(s.opcode, payload.size()));
        if (roce::build(bytes, s) == 0) return;
        if ((flags & 32) != 0) {
            // Sealed with the CRC its bytes give, or with one bit of it off.
            const std::size_t at = bytes.size() - roce::kIcrcLen;
            const std::uint32_t icrc = ~roce::crc32_update(roce::kCrc32Init, {bytes.data(), at});
            roce::icrc_store(bytes.data() + at, icrc ^ ((flags & 64) != 0 ? 1u : 0u));
            deliver(bytes, true);
            return;
        }
        deliver(bytes);
    }

    // Raw bytes as a packet, optionally given this QP's number and a PSN it expects.
    void deliver_raw(Input& in) {
        const std::uint8_t how = in.u8();
        std::span<const std::uint8_t> raw = in.bytes(in.u16() % 2048);
        std::vector<std::uint8_t> bytes(raw.begin(), raw.end());
        if ((how & 1) && bytes.size() >= 12) {
            bytes[5] = cfg_.qpn >> 16, bytes[6] = cfg_.qpn >> 8, bytes[7] = cfg_.qpn;
            const std::uint32_t psn = pick_psn(in);
            bytes[9] = psn >> 16, bytes[10] = psn >> 8, bytes[11] = psn;
        }
        deliver(bytes);
    }

    void post_recv(Input& in) { queues_.post_recv(recv_wr(in, next_wr_id_++)); }
    void post_send(Input& in) { queues_.post_send(send_wr(in, next_wr_id_++)); }

    roce::RcConfig cfg_;
    GuardedMemory mem_;
    CheckedQueues queues_{true};
    Wire wire_{cfg_};
    std::unique_ptr<roce::RcQp> qp_;
    roce::RcTime now_ = 1'000'000;
    std::uint64_t next_wr_id_ = 1;
};

// A QP at RTS with the attributes the unit tests use; `mtu`, PSNs, and RC or UC (the top bit
// of the access byte) chosen by the input.
inline roce::RcConfig fuzz_config(Input& in) {
    roce::RcConfig c;
    c.qpn = 0x11;
    c.dest_qpn = 0x22;
    static constexpr std::uint32_t kMtus[] = {256, 512, 1024, 2048, 4096};
    c.mtu = kMtus[in.u8() % 5];
    const std::uint8_t psn_how = in.u8();
    c.sq_psn = psn_how & 1 ? roce::kPsnMask - (psn_how >> 1) : 100;  // near the wrap too
    c.rq_psn = psn_how & 2 ? roce::kPsnMask - (psn_how >> 2) : 5000;
    c.timeout = 10;
    c.retry_cnt = in.u8() % 8;
    c.rnr_retry = in.u8() % 8;
    c.min_rnr_timer = 1;
    c.max_rd_atomic = 1 + in.u8() % 8;
    c.max_dest_rd_atomic = 1 + in.u8() % 8;
    const std::uint8_t access = in.u8();
    c.remote_access = access & (kAll & ~verbs::access::local_write);
    if ((access & 0x80) != 0) c.service = roce::Transport::uc;
    c.sq_depth = 16;
    c.ack_every = 1 + in.u8() % 16;
    return c;
}

}  // namespace snic::fuzz
