// libFuzzer target: the UD engine (proto/roce/ud_qp.cc) fed datagrams (built with chosen
// Q_Key, P_Key, opcode and length, or raw), receive and send WRs, unresolved destinations
// and time. Asserts: the fake memory changes only where the engine was granted write access
// (the GRH area and payload land inside the receive WR's buffers), every completion is of an
// outstanding WR and reports no more bytes than its buffers hold, and every datagram sent
// parses as UD SEND to the WR's destination QP with at most one MTU of payload.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/roce/packet.h"
#include "proto/roce/ud_qp.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/rc_driver.h"

namespace {

using namespace snic;
using fuzz::Input;

class Wire final : public roce::UdWire {
  public:
    explicit Wire(std::uint32_t mtu) : mtu_(mtu) {}
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        if (refuse_alloc) return {};
        SNIC_FUZZ_REQUIRE(len + roce::kIcrcLen <= buf_.size());
        return {buf_.data(), len};
    }
    bool tx_send(std::size_t len, net::Ipv4Addr, std::uint32_t dst_qpn) override {
        SNIC_FUZZ_REQUIRE(len + roce::kIcrcLen <= buf_.size());
        std::memset(buf_.data() + len, 0, roce::kIcrcLen);
        const roce::Packet p = roce::parse({buf_.data(), len + roce::kIcrcLen});
        SNIC_FUZZ_REQUIRE(p.ok());
        SNIC_FUZZ_REQUIRE(p.deth() != nullptr);
        SNIC_FUZZ_REQUIRE(p.bth().dest_qp.host() == (dst_qpn & 0xffffff));
        SNIC_FUZZ_REQUIRE(p.payload.size() <= mtu_);
        return !unresolved;
    }
    bool refuse_alloc = false, unresolved = false;

  private:
    std::uint32_t mtu_;
    std::array<std::uint8_t, 4096 + 256> buf_{};
};

constexpr std::uint32_t kQkey = 0x11223344;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Input in(data, size);
    roce::UdConfig cfg;
    cfg.qpn = 0x33;
    cfg.qkey = kQkey;
    static constexpr std::uint32_t kMtus[] = {256, 512, 1024, 2048, 4096};
    cfg.mtu = kMtus[in.u8() % 5];
    fuzz::GuardedMemory mem;
    fuzz::add_regions(mem);
    fuzz::CheckedQueues q(false);
    Wire wire(cfg.mtu);
    roce::UdQp qp(cfg, mem, q, wire);
    qp.start_sending(in.u32());
    std::uint64_t now = 1'000'000, wr_id = 1;
    std::array<std::uint8_t, 20> ip{0x45, 0, 0,   0,   0, 0, 0x40, 0,   64, 17,
                                    0,    0, 192, 168, 1, 2, 192,  168, 1,  3};

    auto deliver = [&](std::span<const std::uint8_t> bytes) {
        const roce::Packet p = roce::parse(bytes);
        if (!p.ok()) return;
        mem.begin();
        qp.on_packet(p, ip);
        mem.check();
    };
    auto poll = [&] {
        mem.begin();
        const bool did = qp.poll(now);
        mem.check();
        return did;
    };

    for (int step = 0; step < 256 && !in.empty(); ++step) {
        switch (in.u8() % 7) {
            case 0:
            case 1: {
                roce::PacketSpec s;
                const std::uint8_t how = in.u8();
                s.opcode = how < 200 ? (how & 1 ? roce::Opcode::ud_send_only_with_immediate
                                                : roce::Opcode::ud_send_only)
                                     : fuzz::kRcOpcodes[how % fuzz::kRcOpcodes.size()];
                s.dest_qp = cfg.qpn;
                s.psn = in.u32() & 0xffffff;
                s.pkey = how & 2 ? in.u16() : roce::kDefaultPkey;
                s.solicited = how & 4;
                s.deth.qkey = how & 8 ? in.u32() : kQkey;
                s.deth.src_qp = in.u32() & 0xffffff;
                s.immdt.imm = in.u32();
                std::vector<std::uint8_t> payload(in.u16() % (cfg.mtu + 64), how);
                s.payload = payload;
                std::vector<std::uint8_t> bytes(roce::transport_length(s.opcode, payload.size()));
                if (roce::build(bytes, s) != 0) deliver(bytes);
                break;
            }
            case 2: {
                const auto raw = in.bytes(in.u16() % 2048);
                std::vector<std::uint8_t> bytes(raw.begin(), raw.end());
                deliver(bytes);
                for (std::size_t i = 0; i < ip.size() && !in.empty(); i += 4) ip[i] ^= in.u8();
                break;
            }
            case 3: {
                verbs::RecvWr wr;
                wr.wr_id = wr_id++;
                wr.num_sge = in.u8() % 5;
                for (std::uint32_t i = 0; i < wr.num_sge; ++i) {
                    wr.sge[i].lkey = fuzz::pick_key(in);
                    wr.sge[i].addr = fuzz::pick_addr(in, wr.sge[i].lkey);
                    wr.sge[i].length = fuzz::pick_len(in);
                }
                q.post_recv(wr);
                break;
            }
            case 4: {
                verbs::SendWr wr;
                wr.wr_id = wr_id++;
                const std::uint8_t how = in.u8();
                wr.op = how < 200 ? (how & 1 ? verbs::WrOp::send_imm : verbs::WrOp::send)
                                  : static_cast<verbs::WrOp>(how % verbs::kWrOpCount);
                wr.signaled = how & 2;
                wr.imm_or_rkey = in.u32();
                wr.ud.dgid = {};
                if (how & 4) {
                    for (auto& b : wr.ud.dgid) b = in.u8();
                } else {
                    wr.ud.dgid[10] = wr.ud.dgid[11] = 0xff;
                    wr.ud.dgid[12] = 192, wr.ud.dgid[13] = 168, wr.ud.dgid[14] = 1;
                    wr.ud.dgid[15] = in.u8();
                }
                wr.ud.remote_qpn = in.u32();
                wr.ud.remote_qkey = in.u32();
                if (how & 8) {
                    wr.inline_data = true;
                    wr.inline_len = in.u16() % (verbs::kMaxInline + 1);
                } else {
                    wr.num_sge = in.u8() % 5;
                    for (std::uint32_t i = 0; i < wr.num_sge; ++i) {
                        wr.sge[i].lkey = fuzz::pick_key(in);
                        wr.sge[i].addr = fuzz::pick_addr(in, wr.sge[i].lkey);
                        wr.sge[i].length = fuzz::pick_len(in);
                    }
                }
                q.post_send(wr);
                break;
            }
            case 5: {
                const std::uint8_t how = in.u8();
                wire.refuse_alloc = how & 1;
                wire.unresolved = how & 2;
                now += (how & 4) ? roce::UdQp::kResolveWaitNs : std::uint64_t{in.u16()} * 1000;
                poll();
                break;
            }
            case 6:
                if (in.u8() == 0xEE) qp.to_error();
                poll();
                break;
        }
    }
    wire.refuse_alloc = wire.unresolved = false;
    for (int i = 0; i < 64; ++i) {
        now += roce::UdQp::kResolveWaitNs;
        if (!poll()) break;
    }
    return 0;
}
