// The iWARP device's connection management: MPA request and reply (RFC 5044, with RFC
// 6581's IRD/ORD header) over snic's TCP, carried by the port's IwarpTransport
// (daemon/iwarp/iwarp_transport.h), whose connection a QP binds to when libsnic moves it to
// RTR. The consumer's private data travels alone (no rdma_cm header: the TCP connection has
// the addresses); requests, replies, rejections, refused connects and closes become the
// neutral events of daemon/cm/wire.h.
//
// On a port of several queues each lane has its own TCP and iWARP transport, and a process's
// QPs run on its lane (ProcessLanes, daemon/verbs/device.h): a listener listens, and a
// connection is made, on its owner's lane, whose TCP the port then hands the local TCP port's
// segments (Port::claim_tcp_port). A WireConn names the lane in its high 32 bits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "daemon/cm/wire.h"
#include "daemon/port/tcp_ports.h"
#include "daemon/verbs/device.h"

namespace snic::daemon {

class IwarpTransport;
struct IwCmEvent;

class IwCmWire final : public CmWire {
  public:
    // `lanes`: the port's transports by queue (one for a port of one queue); `processes`: the
    // lane of each process (nullptr with one lane); `ports`: a shared-address port's TCP
    // ports (nullptr: the address is snicd's alone), taken for each listener and connection
    // and given back when they go.
    IwCmWire(std::vector<IwarpTransport*> lanes, std::shared_ptr<ProcessLanes> processes,
             TcpPortHolder* ports = nullptr)
        : lanes_(std::move(lanes)), processes_(std::move(processes)), ports_(ports) {}

    std::uint8_t transport() const override { return shm::kTransportIwarp; }
    bool datagrams() const override { return false; }  // iWARP is connected alone
    std::size_t private_max(CmMessage m, bool datagram) const override;

    Result<bool> listen(std::uint16_t port, std::uint32_t backlog, std::uint8_t qp_type,
                        const Peer& owner) override;
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
    struct Listening {
        std::size_t lane = 0;
        std::uint32_t refs = 0;
    };
    // The lane of `owner`'s QPs (0 with one lane).
    std::size_t lane_for(const Peer& owner) const;
    IwarpTransport& lane_of(WireConn conn) const;
    // Local TCP port `port` to lane `lane`: refused (EADDRINUSE) while another lane's TCP
    // still has a listener or a connection on it (one in TIME-WAIT too).
    Status claim(std::size_t lane, std::uint16_t port);
    void translate(std::size_t lane, const IwCmEvent& e);
    // On a shared address, `port` taken from the kernel, or given back (no-ops otherwise).
    Status take_port(std::uint16_t port);
    void give_port(std::uint16_t port);
    // A connection's hold of its local port, given back once.
    void let_go(WireConn conn);

    std::vector<IwarpTransport*> lanes_;       // by queue
    std::shared_ptr<ProcessLanes> processes_;  // with several lanes
    TcpPortHolder* ports_ = nullptr;
    std::map<WireConn, std::uint16_t> held_;      // connection -> its local port, with ports_
    std::map<std::uint16_t, Listening> listens_;  // TCP port -> its listeners' lane
};

}  // namespace snic::daemon
