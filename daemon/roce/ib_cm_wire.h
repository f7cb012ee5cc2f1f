// The RoCEv2 device's connection management: IB CM (proto/cm/agent.h) on the port's QP1,
// whose MADs cross between the lcore and the control thread through the port's GsiPort
// (daemon/roce/gsi.h). rdma_cm's header (proto/cm/cma.h) leads the REQ's private data: the
// addresses and ports the service matches listeners with. Requests, replies, rejections,
// disconnects and SIDR's datagram exchange become the neutral events of daemon/cm/wire.h.
#pragma once

#include <cstdint>

#include "daemon/cm/wire.h"
#include "proto/cm/agent.h"

namespace snic::daemon {

class GsiPort;

class IbCmWire final : public CmWire, private cm::Sink {
  public:
    // `gsi` may be null (a port without a wire, in tests): MADs are then dropped.
    // `max_half_open`: connections being set up at once; `id_key` keys the CM's
    // communication identifiers (proto/cm/agent.h).
    IbCmWire(GsiPort* gsi, std::uint32_t local_ip, const SipKey& id_key,
             std::uint32_t max_half_open);

    std::uint8_t transport() const override { return shm::kTransportRoce; }
    bool datagrams() const override { return true; }
    std::size_t private_max(CmMessage m, bool datagram) const override;

    Result<bool> listen(std::uint16_t, std::uint32_t, std::uint8_t, const Peer&) override {
        return false;
    }
    void unlisten(std::uint16_t) override {}
    Result<WireConn> connect(const CmConnectSpec& spec) override;
    void owned_by(WireConn, const Peer&) override {}
    Status accept(WireConn conn, const shm::CmConnParam& param, std::uint8_t qp_type) override;
    Status confirm(WireConn conn, std::span<const std::uint8_t> pd) override;
    Status reject(WireConn conn, bool request, bool datagram,
                  std::span<const std::uint8_t> pd) override;
    void refuse(WireConn conn, Refusal why, bool datagram) override;
    Status disconnect(WireConn conn) override;
    void forget(WireConn) override {}  // the agent ends its own exchanges
    void release(WireConn conn) override;
    std::uint32_t qp_binding(WireConn) const override { return 0; }

    void poll_fds(std::vector<int>& out) const override;
    void run(std::uint64_t now_ns) override;
    std::uint64_t next_deadline() const override { return agent_.next_deadline(); }
    bool status(shm::CmPortStatus& out) const override;
    void readdress(std::uint32_t ip) override { agent_.set_local_ip(ip); }

  private:
    // cm::Sink: the agent's MADs out through QP1, its events to the service.
    void send_mad(std::uint32_t remote_ip, std::uint32_t remote_qpn, std::uint32_t qkey,
                  std::span<const std::uint8_t> mad) override;
    void deliver(const cm::Event& e) override;

    GsiPort* gsi_;
    cm::Agent agent_;
};

}  // namespace snic::daemon
