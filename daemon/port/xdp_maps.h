// The maps of snicd's XDP program on a shared-address port (daemon/port/xdp/snic_xdp.bpf.c):
// the port's address, the TCP ports that are snicd's, and the program's counters. snicd
// finds them through the program the PMD attached to the interface. Setup and control
// thread only: each call is a bpf() system call.
#pragma once

#include <cstdint>
#include <string>

#include <utility>

#include "common/result.h"

namespace snic::daemon {

// Where snicd's XDP program is: the build tree's while snicd runs from it, else the installed
// one.
std::string xdp_program_path();

// Makes interface `ifindex` ready for a shared-address port before its PMD loads snicd's
// program there, and claims it: the returned descriptor holds a lock (per network namespace
// and interface) for as long as it is open, so that a second snicd cannot take the interface.
// Nothing attached is fine; snicd's program with the lock free is what a snicd that died left
// behind, and is detached; another program, or the lock held, is an error that says so.
Result<int> claim_interface(int ifindex, const std::string& name);

// What the program did with the frames it saw, summed over the CPUs.
struct XdpCounts {
    std::uint64_t roce = 0;     // RoCEv2 frames sent to snicd
    std::uint64_t tcp = 0;      // TCP segments to a port of snicd's sent to snicd
    std::uint64_t passed = 0;   // frames left to the kernel
    std::uint64_t no_sock = 0;  // snicd's, but no socket on their queue: left to the kernel
};

class XdpMaps {
  public:
    // The maps of the program attached to interface `ifindex`; an error if none is attached
    // or it is not snicd's.
    static Result<XdpMaps> of_interface(int ifindex);
    // The maps of the program `prog_fd` (the tests load it themselves).
    static Result<XdpMaps> of_program(int prog_fd);

    // The port's IPv4 address (host order); 0 sends nothing to snicd.
    Status set_address(std::uint32_t ip);
    // Whether segments to local TCP port `port` are snicd's.
    Status hold_tcp_port(std::uint16_t port, bool held);
    Result<XdpCounts> counts() const;

  private:
    // One map's descriptor, closed with it.
    class MapFd {
      public:
        MapFd() = default;
        explicit MapFd(int fd) : fd_(fd) {}
        MapFd(MapFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
        MapFd& operator=(MapFd&& o) noexcept;
        ~MapFd();
        int get() const { return fd_; }

      private:
        int fd_ = -1;
    };

    XdpMaps() = default;
    MapFd addr_;
    MapFd tcp_ports_;
    MapFd counts_;
};

}  // namespace snic::daemon
