// The out-of-band TCP exchange between a snic-perf server and client: the parameters both
// must agree on, each QP's address, and the syncs between sizes.
#pragma once

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
    // Both sides reach this point; each sends `mine` and returns the peer's.
    std::uint64_t sync(std::uint64_t mine = 0);

  private:
    int fd_ = -1;
};

}  // namespace snic::perf
