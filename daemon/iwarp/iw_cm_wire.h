// The iWARP device's connection management: MPA request and reply (RFC 5044, with RFC
// 6581's IRD/ORD header) over snic's TCP, carried by the port's IwarpTransport
// (daemon/iwarp/iwarp_transport.h), whose connection a QP binds to when libsnic moves it to
// RTR. The consumer's private data travels alone (no rdma_cm header: the TCP connection has
// the addresses); requests, replies, rejections, refused connects and closes become the
// neutral events of daemon/cm/wire.h.
#pragma once

#include <cstdint>
#include <map>

#include "daemon/cm/wire.h"
#include "daemon/port/tcp_ports.h"

namespace snic::daemon {

class IwarpTransport;
struct IwCmEvent;

class IwCmWire final : public CmWire {
  public:
    // `ports`: a shared-address port's TCP ports (nullptr: the address is snicd's alone),
    // taken for each listener and connection and given back when they go.
    explicit IwCmWire(IwarpTransport& iw, TcpPortHolder* ports = nullptr)
        : iw_(iw), ports_(ports) {}

    std::uint8_t transport() const override { return shm::kTransportIwarp; }
    bool datagrams() const override { return false; }  // iWARP is connected alone
    std::size_t private_max(CmMessage m, bool datagram) const override;

    Result<bool> listen(std::uint16_t port, std::uint32_t backlog, std::uint8_t qp_type) override;
    void unlisten(std::uint16_t port) override;
    Result<WireConn> connect(const CmConnectSpec& spec) override;
    void owned_by(WireConn conn, const Peer& owner) override;
    Status accept(WireConn conn, const shm::CmConnParam& param, std::uint8_t qp_type) override;
    Status confirm(WireConn, std::span<const std::uint8_t>) override { return Ok{}; }
    Status reject(WireConn conn, bool request, bool datagram,
                  std::span<const std::uint8_t> pd) override;
    void refuse(WireConn conn, Refusal why, bool datagram) override;
    Status disconnect(WireConn conn) override;
    void forget(WireConn conn) override;
    void release(WireConn conn) override;
    std::uint32_t qp_binding(WireConn conn) const override;

    void poll_fds(std::vector<int>& out) const override;
    void run(std::uint64_t now_ns) override;
    std::uint64_t next_deadline() const override;  // none: the lcore keeps TCP's timers
    bool status(shm::CmPortStatus&) const override { return false; }

  private:
    void translate(const IwCmEvent& e);
    // On a shared address, `port` taken from the kernel, or given back (no-ops otherwise).
    Status take_port(std::uint16_t port);
    void give_port(std::uint16_t port);
    // A connection's hold of its local port, given back once.
    void let_go(WireConn conn);

    IwarpTransport& iw_;
    TcpPortHolder* ports_;
    std::map<WireConn, std::uint16_t> held_;  // connection -> its local port, with ports_
};

}  // namespace snic::daemon
