// The UD transport engine of one QP (IBA ch. 9.8, unreliable datagram): every message is one
// packet, UD SEND ONLY (0x64) or with immediate (0x65), with a DETH (Q_Key, source QP). No
// PSN check, no acknowledgement, no retransmission: a send WR completes when its packet has
// left, a receive WR when a packet for it arrived. A QP takes datagrams from any source; the
// Q_Key alone says who may send to it.
//
// Pure like the RC engines: it meets the daemon through proto/verbs' QpMemory and QpQueues and
// the UdWire below, and runs on the lcore of its port only.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "common/counter.h"
#include "proto/net/addr.h"
#include "proto/roce/bth.h"
#include "proto/roce/packet.h"
#include "proto/roce/psn.h"
#include "proto/verbs/qp_memory.h"
#include "proto/verbs/wr.h"

namespace snic::roce {

// The controlled Q_Key rule (IBA 10.2.5, C10-15): a WR's Q_Key with its high bit set means
// the QP's own Q_Key.
constexpr std::uint32_t effective_qkey(std::uint32_t wr_qkey, std::uint32_t qp_qkey) {
    return (wr_qkey & 0x80000000u) != 0 ? qp_qkey : wr_qkey;
}

// A UD QP's end of the wire: one packet at a time, as RcWire, but each to its own address.
class UdWire {
  public:
    // Room for a transport packet of `len` bytes (without the ICRC); empty when no buffer.
    virtual std::span<std::uint8_t> tx_alloc(std::size_t len) = 0;
    // Sends the packet tx_alloc gave towards `dst`. False when it could not leave now (the
    // peer's MAC is being resolved): the packet is dropped and the engine tries again later.
    virtual bool tx_send(std::size_t len, net::Ipv4Addr dst, std::uint32_t dst_qpn) = 0;

  protected:
    ~UdWire() = default;
};

struct UdConfig {
    std::uint32_t qpn = 0;
    std::uint32_t qkey = 0;
    std::uint32_t mtu = 1024;  // the port's: the largest message, in payload bytes
    std::uint32_t sq_psn = 0;
    std::uint16_t pkey = kDefaultPkey;
    bool srq = false;  // receive WRs from an SRQ: an error never flushes it
    std::uint32_t flush_budget = verbs::kFlushBudget;  // WRs flushed per queue per poll
};

// Written by the owning lcore only, readable from any thread.
struct UdCounters {
    Counter tx_packets, rx_packets;
    Counter tx_too_long;      // larger than the MTU: no packet, completed (C10-93.1.1)
    Counter tx_unresolved;    // the destination's MAC was not known yet: sent again later
    Counter tx_bad_dest;      // not an IPv4-mapped GID: completed in error
    Counter drop_bad_qkey;    // the packet's Q_Key is not the QP's
    Counter drop_bad_pkey;    // not of the default partition
    Counter drop_bad_opcode;  // not a UD opcode
    Counter drop_no_recv;     // no receive WR posted: dropped (UD has no RNR)
    Counter drop_qp_error;    // arrived while the QP is in error
    Counter rx_too_long;      // longer than the receive WR's buffers: LOC_LEN_ERR
};

struct UdCounterField {
    std::string_view name;
    Counter UdCounters::*field;
};
inline constexpr UdCounterField kUdCounterFields[] = {
    {"tx_packets", &UdCounters::tx_packets},
    {"rx_packets", &UdCounters::rx_packets},
    {"tx_too_long", &UdCounters::tx_too_long},
    {"tx_unresolved", &UdCounters::tx_unresolved},
    {"tx_bad_dest", &UdCounters::tx_bad_dest},
    {"drop_bad_qkey", &UdCounters::drop_bad_qkey},
    {"drop_bad_pkey", &UdCounters::drop_bad_pkey},
    {"drop_bad_opcode", &UdCounters::drop_bad_opcode},
    {"drop_no_recv", &UdCounters::drop_no_recv},
    {"drop_qp_error", &UdCounters::drop_qp_error},
    {"rx_too_long", &UdCounters::rx_too_long},
};

class UdQp {
  public:
    // How long a send WR waits for its destination's MAC before it is completed unsent (as a
    // datagram lost on the wire), and how often it tries meanwhile.
    static constexpr std::uint64_t kResolveWaitNs = 3'000'000'000;
    static constexpr std::uint64_t kResolveRetryNs = 20'000;
    // Send WRs one poll takes at most.
    static constexpr std::uint32_t kMaxBurst = 16;

    UdQp(const UdConfig& config, verbs::QpMemory& memory, verbs::QpQueues& queues, UdWire& wire);

    // Modify QP changed the Q_Key.
    void set_qkey(std::uint32_t qkey) { cfg_.qkey = qkey; }
    // RTR -> RTS: the first PSN the send side uses.
    void start_sending(std::uint32_t sq_psn) { psn_ = sq_psn & kPsnMask; }

    // A packet to this QP (parsed, ICRC verified), with the IPv4 header it came in.
    void on_packet(const Packet& pkt, std::span<const std::uint8_t, 20> ipv4_header);
    // Takes and sends send WRs (kMaxBurst at most); in error, flushes what is posted
    // (flush_budget of each queue at most). True when it did something.
    bool poll(std::uint64_t now_ns);
    // 0 when poll() has output it could send now, a time when a WR waits for its destination's
    // MAC, else UINT64_MAX.
    std::uint64_t next_deadline() const;
    // Modify QP to ERR: the WR held and every WR posted complete with WR_FLUSH_ERR (by poll()).
    void to_error() { error_ = true; }
    bool failed() const { return error_; }
    std::uint32_t send_wrs_held() const { return held_ ? 1 : 0; }
    std::uint32_t next_psn() const { return psn_; }
    std::uint32_t qpn() const { return cfg_.qpn; }
    const UdCounters& counters() const { return counters_; }

  private:
    enum class Sent : std::uint8_t { done, retry, failed };
    Sent send(const verbs::SendWr& wr, std::uint64_t now_ns);
    void complete_send(const verbs::SendWr& wr, verbs::WcStatus status);
    // Completes the WR held and at most flush_budget of each queue's with WR_FLUSH_ERR, in
    // order; sets more_ when a queue may hold more. Returns how many it completed.
    std::uint32_t flush();
    // Scatters the GRH area and the payload into `wr`'s buffers; the completion status.
    verbs::WcStatus place(const verbs::RecvWr& wr, std::span<const std::uint8_t, 20> ipv4_header,
                          std::span<const std::uint8_t> payload);

    UdConfig cfg_;
    verbs::QpMemory& memory_;
    verbs::QpQueues& queues_;
    UdWire& wire_;
    UdCounters counters_;
    std::uint32_t psn_ = 0;
    bool error_ = false;
    bool held_ = false;             // wr_ waits for its destination's MAC
    bool more_ = false;             // the last poll stopped at its burst
    std::uint64_t held_since_ = 0;  // when wr_ was first tried
    std::uint64_t retry_at_ = 0;
    verbs::SendWr wr_;
};

}  // namespace snic::roce
