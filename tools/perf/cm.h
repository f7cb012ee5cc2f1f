// snic-perf -R: an end's RC QPs created and connected through rdma_cm, as perftest's -R
// does; the server listens, the client connects one id per QP. With --loopback both ends
// are in this process: the peer device listens and -d connects.
#pragma once

#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <vector>

#include "tools/perf/end.h"
#include "tools/perf/options.h"

namespace snic::perf {

class Oob;

// The rdma_cm ids of one end's -q QPs (and the server's listener), connected by connect()
// until the destructor. The QPs belong to the ids: destroy this before the End.
class CmLink {
  public:
    // Server: listens on its device's IPv4 address, port -p + 1, at once (so that its
    // listener shows before the exchange starts); --loopback: the same on `end`, the peer
    // device, at a port the daemon picks. Client: an event channel.
    CmLink(const End& end, const Options& o);
    // Server: tells the client the address over `oob` and accepts -q connections. Client:
    // learns the address over `oob` and connects -q ids from -d's address (or --source_ip).
    // Each QP joins `end` as it is made.
    void connect(End& end, const Options& o, Oob& oob);
    // --loopback: connects -q ids from `a`'s address to the listener on `b`'s (this link's
    // end), accepting each in turn; each QP joins its end as it is made.
    void connect_loopback(End& a, End& b, const Options& o);
    // Disconnects every id (waiting a little for the DISCONNECTED events), then destroys
    // the QPs, the ids and the event channel.
    ~CmLink();
    CmLink(const CmLink&) = delete;
    CmLink& operator=(const CmLink&) = delete;

  private:
    void accept_all(End& end, const Options& o);
    void connect_all(End& end, const Options& o);
    // The next event within `ms`, or nullptr on timeout; fails if the peer closes the
    // exchange meanwhile (`watch_peer`: not at teardown, where it does so normally).
    rdma_cm_event* next_event(int ms, bool watch_peer);
    // Waits (at most `ms`) for the next event, which must be `want` on `id` (any id if
    // nullptr); returns its id. Anything else fails, naming the event and its status.
    rdma_cm_id* expect(rdma_cm_event_type want, rdma_cm_id* id, int ms);
    rdma_conn_param conn_param(End& end) const;
    // A connecting id resolved from `src` to `dst` with its route, its QP made on `end`;
    // rdma_connect has been called.
    rdma_cm_id* start_connect(End& end, sockaddr_in src, sockaddr_in dst);

    Oob* oob_ = nullptr;  // connect()'s
    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* listener_ = nullptr;
    sockaddr_in listening_{};
    std::vector<rdma_cm_id*> ids_;  // one per QP, in the End's QP order
    std::vector<rdma_cm_id*> connected_;
};

}  // namespace snic::perf
