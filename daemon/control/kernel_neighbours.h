// A shared-address port's neighbours, from the kernel's table over rtnetlink, on the control
// thread (NeighbourSource's implementation; daemon/port/neighbours.h says why).
//
// - At start, the table's IPv4 entries on the interface are dumped and handed to the port.
// - Every change to an entry of the interface (RTMGRP_NEIGH) that gives it a MAC is handed
//   on as it comes.
// - An address the port asks for is looked up (RTM_GETNEIGH) and, unless the kernel has it
//   already, resolved by the kernel: RTM_NEWNEIGH with NTF_USE, as `ip neigh replace ADDR
//   dev IF use` does; the kernel sends its own ARP request and the answer arrives as a
//   change.
//
// The lcore and the control thread meet in two SPSC queues; the control thread watches
// fd() (the netlink socket) and wakeup_fd() (the lcore's asks) in its poll.
//
// The same socket hears the interface's addresses and MTU (RTMGRP_IPV4_IFADDR, RTMGRP_LINK):
// the port keeps the address and MTU it started with, and when the interface loses that
// address or changes its MTU, snicd's log says so (once a change), that it goes on with what
// it had until it is restarted.
#pragma once

#include <cstdint>
#include <memory>

#include <linux/netlink.h>

#include "common/result.h"
#include "daemon/lcore/spsc_queue.h"
#include "daemon/port/neighbours.h"

namespace snic::daemon {

class KernelNeighbours final : public NeighbourSource {
  public:
    // `ip` (host order) and `mtu`: the port's, as it started.
    static Result<std::unique_ptr<KernelNeighbours>> open(int ifindex, std::uint32_t ip,
                                                          std::uint32_t mtu);
    ~KernelNeighbours() override;
    KernelNeighbours(const KernelNeighbours&) = delete;
    KernelNeighbours& operator=(const KernelNeighbours&) = delete;

    // The lcore (NeighbourSource).
    void ask(net::Ipv4Addr ip) override;
    bool next(net::Ipv4Addr& ip, net::MacAddr& mac) override;

    // The control thread: readable when the kernel has news, and when the lcore asked.
    int fd() const { return sock_; }
    int wakeup_fd() const { return wakeup_.fd(); }
    // The control thread: reads what the kernel sent (fd() readable).
    void on_kernel();
    // The control thread: passes the lcore's asks on to the kernel (wakeup_fd() readable).
    void on_asks();

    std::uint64_t asks_lost() const { return asks_lost_; }
    std::uint64_t learnt_lost() const { return learnt_lost_; }

  private:
    struct Learnt {
        std::uint32_t ip;
        net::MacAddr mac;
    };
    KernelNeighbours(int ifindex, int sock, std::uint32_t ip, std::uint32_t mtu)
        : ifindex_(ifindex), sock_(sock), ip_(ip), mtu_(mtu) {}
    // An address or link message about the interface: a warning if it takes the port's
    // address or MTU away.
    void interface_news(const nlmsghdr* h);
    // Sends one rtnetlink request about `ip` (0 with `dump`: the whole table).
    bool request(std::uint16_t type, std::uint16_t flags, std::uint32_t ip, bool use);
    // Takes the entries of one batch of messages.
    void take(const std::uint8_t* buf, std::size_t len);

    const int ifindex_;
    const int sock_;
    const std::uint32_t ip_;
    const std::uint32_t mtu_;
    std::uint32_t mtu_seen_ = 0;  // the interface's MTU last warned about
    std::uint32_t seq_ = 0;
    SpscQueue<std::uint32_t, 256> asks_;  // lcore -> control thread
    SpscQueue<Learnt, 1024> learnt_;      // control thread -> lcore
    Wakeup wakeup_;
    std::uint64_t asks_lost_ = 0;    // queue full (the lcore asks again after its retry)
    std::uint64_t learnt_lost_ = 0;  // queue full (the next change or ask brings it again)
};

}  // namespace snic::daemon
