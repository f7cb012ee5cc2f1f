// The TCP ports of a shared-address port (setup and control thread: system calls).
//
// On such a port the kernel and snicd share the address, so each TCP port is one side's: a
// port snicd's iWARP listens on or connects from is taken from the kernel while snicd uses
// it, as Linux's iWARP port mapper takes a port for an RNIC:
//   - a kernel socket bound to the address and port (never listening, never connected)
//     keeps every other program, and the kernel's own connects, off it; a port that the
//     kernel or a program has already is refused (EADDRINUSE), as a second bind would be;
//   - the XDP program sends the port's segments to snicd, so that the kernel never sees
//     them (and never answers them with a reset).
#pragma once

#include <cstdint>
#include <map>

#include "daemon/port/xdp_maps.h"

namespace snic::daemon {

class TcpPortHolder {
  public:
    virtual ~TcpPortHolder() = default;
    // Takes `port` for snicd, once more if it has it: 0, or the errno of the refusal.
    virtual int hold(std::uint16_t port) = 0;
    // Gives one hold of `port` back; the last one returns it to the kernel.
    virtual void release(std::uint16_t port) = 0;
};

class SharedTcpPorts final : public TcpPortHolder {
  public:
    // `maps` outlives it; `ip` is the port's address (host order).
    SharedTcpPorts(XdpMaps& maps, std::uint32_t ip) : maps_(maps), ip_(ip) {}
    ~SharedTcpPorts() override;
    SharedTcpPorts(const SharedTcpPorts&) = delete;
    SharedTcpPorts& operator=(const SharedTcpPorts&) = delete;

    int hold(std::uint16_t port) override;
    void release(std::uint16_t port) override;
    std::size_t held() const { return ports_.size(); }
    // The port's address changed: the ports held are held on `ip` from here on (a port the
    // kernel has on `ip` already stays held on the old address only, and a warning says so).
    void readdress(std::uint32_t ip);

  private:
    // A kernel socket bound to ip:port, or -errno.
    static int bind_port(std::uint32_t ip, std::uint16_t port);

    struct Held {
        int fd = -1;  // the kernel socket bound to the port
        std::uint32_t holds = 0;
    };
    XdpMaps& maps_;
    std::uint32_t ip_;
    std::map<std::uint16_t, Held> ports_;
};

}  // namespace snic::daemon
