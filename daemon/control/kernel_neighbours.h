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
// The same socket hears the interface's addresses and its link (RTMGRP_IPV4_IFADDR,
// RTMGRP_LINK): news of either is passed on to whoever follows the interface
// (on_interface_change), once per batch the kernel sends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <linux/netlink.h>

#include "common/result.h"
#include "daemon/lcore/spsc_queue.h"
#include "daemon/port/neighbours.h"

namespace snic::daemon {

class KernelNeighbours final : public NeighbourSource {
  public:
    static Result<std::unique_ptr<KernelNeighbours>> open(int ifindex);
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
    // The control thread: `fn` runs (from on_kernel) when the interface's addresses or link
    // may have changed; it reads what they are now.
    void on_interface_change(std::function<void()> fn) { interface_change_ = std::move(fn); }

    std::uint64_t asks_lost() const { return asks_lost_; }
    std::uint64_t learnt_lost() const { return learnt_lost_; }

  private:
    struct Learnt {
        std::uint32_t ip;
        net::MacAddr mac;
    };
    KernelNeighbours(int ifindex, int sock) : ifindex_(ifindex), sock_(sock) {}
    // Whether an address or link message is about the interface.
    bool about_interface(const nlmsghdr* h) const;
    // Sends one rtnetlink request about `ip` (0 with `dump`: the whole table).
    bool request(std::uint16_t type, std::uint16_t flags, std::uint32_t ip, bool use);
    // Takes the entries of one batch of messages; true when one was news of the interface.
    bool take(const std::uint8_t* buf, std::size_t len);

    const int ifindex_;
    const int sock_;
    std::function<void()> interface_change_;
    std::uint32_t seq_ = 0;
    SpscQueue<std::uint32_t, 256> asks_;  // lcore -> control thread
    SpscQueue<Learnt, 1024> learnt_;      // control thread -> lcore
    Wakeup wakeup_;
    std::uint64_t asks_lost_ = 0;    // queue full (the lcore asks again after its retry)
    std::uint64_t learnt_lost_ = 0;  // queue full (the next change or ask brings it again)
};

}  // namespace snic::daemon
