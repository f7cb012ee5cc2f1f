// The out-of-band TCP exchange between a snic-perf server and client: the parameters both
// must agree on, each QP's address, and the syncs between sizes.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/perf/end.h"
#include "tools/perf/options.h"

namespace snic::perf {

// The out-of-band TCP connection between server and client (never used in the timed loop).
class Oob {
  public:
    // Server: accepts one client on `port`; client: connects to host:port (retrying 10 s).
    explicit Oob(const Options& o);
    ~Oob();
    Oob(const Oob&) = delete;
    Oob& operator=(const Oob&) = delete;

    void send_all(const void* p, std::size_t n);
    void recv_all(void* p, std::size_t n);
    // Both sides send their parameters; a peer that would run something else (another
    // test, sizes, iterations or QP count) would wait forever in the middle of a run, so
    // that is an error here. Returns the path MTU both can use.
    std::uint32_t hello(const Options& o, std::uint32_t mtu);
    std::vector<PeerInfo> exchange(const std::vector<PeerInfo>& mine);
    // -R: the server tells the client the IPv4 address and port its rdma_cm id listens on.
    void send_cm_addr(const sockaddr_in& a);
    sockaddr_in recv_cm_addr();
    // Both sides reach this point; each sends `mine` and returns the peer's.
    std::uint64_t sync(std::uint64_t mine = 0);
    // For waits elsewhere (rdma_cm's events): the socket, and whether the peer closed it
    // (it failed, and said why on its side) rather than sent something.
    int fd() const { return fd_; }
    bool peer_closed() const;

  private:
    int fd_ = -1;
};

}  // namespace snic::perf
