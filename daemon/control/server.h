// The control server: the daemon's Unix SOCK_SEQPACKET socket. claim() takes the
// socket path (a lock file makes it exclusive; a stale socket from a dead daemon
// is replaced), listen() binds it once the daemon is ready, and serve() answers
// requests on the control thread until stopped.
//
// Each connection may become one client session (daemon/verbs/session.h) with its first
// open_device; the session lives until the connection closes, however it closes, and
// everything it owned is released at once. A malformed message closes that connection
// only; a client that does not read its replies is disconnected; the server never blocks
// on a client.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/cm/service.h"
#include "daemon/control/control_queue.h"
#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"
#include "shm/control_abi.h"

namespace snic::daemon {

class ControlServer {
  public:
    using StatusFn = std::function<void(shm::StatusReply&)>;

    static Result<std::unique_ptr<ControlServer>> claim(const std::string& path, mode_t mode);
    ~ControlServer();

    // The RDMA devices clients may open, one per port in --port order. Set before serve().
    void set_devices(std::vector<DevicePort> devices) { devices_ = std::move(devices); }
    const std::vector<DevicePort>& devices() const { return devices_; }
    // The control thread: port `port`'s new address and MTU (a shared-address port following
    // its interface), for what sessions and rdma_cm are told and bind to from here on.
    void readdress(std::size_t port, net::Ipv4Prefix ip, std::uint16_t mtu) {
        devices_.at(port).ip = ip;
        devices_.at(port).mtu = mtu;
    }
    Resources& resources() { return resources_; }
    // rdma_cm's service (cm_* ops); none: those ops fail with ENOSYS. Set before serve().
    void set_cm(CmService* cm) { cm_ = cm; }
    // snicctl tcp: fills a page of port `port_index`'s TCP rows, those of the asking client's
    // uid when given (root's question: every row); 0 or an errno. None: the op fails with
    // ENOSYS. Set before serve(); called on the control thread.
    using TcpRowsFn = std::function<int(const shm::TcpConnsReq&, shm::TcpConnsReply&,
                                        std::optional<std::uint32_t> uid)>;
    void set_tcp(TcpRowsFn fn) { tcp_rows_ = std::move(fn); }
    // Any thread but the control thread: runs `fn` there while it serves (nullopt: no answer
    // within `timeout`).
    template <class T>
    std::optional<T> ask(std::function<T()> fn, std::chrono::milliseconds timeout) {
        return questions_.ask<T>(std::move(fn), timeout);
    }
    // Closes every client connection, releasing their sessions (after serve() returned).
    // Another descriptor for the control thread to poll (set before serve()): `on_readable`
    // runs on the control thread each turn it is readable.
    void watch(int fd, std::function<void()> on_readable) {
        watched_.emplace_back(fd, std::move(on_readable));
    }
    void disconnect_all() {
        clients_.clear();
        dying_.clear();
    }
    // The client connections open now (sessions, CM connections and idle ones). The control
    // thread's: from another thread, through ask() while it serves.
    std::size_t connections() const { return clients_.size(); }

    Status listen();
    // Answers requests until `stop` is set (checked at least every 100 ms).
    void serve(const std::atomic<bool>& stop, const StatusFn& status);

    const std::string& path() const { return path_; }

    // Any thread but the control thread (DPDK telemetry's): the sessions' QPs, all of them, by
    // increasing QP number, and QP `qpn` in full, as root sees them, answered by the control
    // thread while it serves. Errors: ETIMEDOUT when no answer came within `timeout`
    // (or the server stopped), ENOENT when no QP has that number.
    Result<std::vector<shm::QpSummary>> ask_qps(std::chrono::milliseconds timeout);
    Result<shm::QpReply> ask_qp(std::uint32_t qpn, std::chrono::milliseconds timeout);

  private:
    struct Client {
        Fd sock;
        Peer peer;
        std::unique_ptr<Session> session;  // from the first open_device on
        std::unique_ptr<CmSession> cm;     // a CM connection instead (cm_open)
    };

    ControlServer(std::string path, mode_t mode, Fd lock);
    // Whether a new client of `uid` may connect, after closing an idle connection (one that
    // holds nothing) if the user's quota or the daemon's is full.
    bool make_room(std::uint32_t uid);
    // Out of descriptors: accepts the waiting connection with the spare one and closes it.
    void shed_newest();
    // Every kLinkCheckMs: each port's link as its device reports it; a change is logged and
    // told to every session of the port's devices (Session::port_event).
    void check_links();
    // Receives and answers one request; false when the client must be disconnected.
    bool handle(Client& c, const StatusFn& status);
    // Runs one well-formed request of the current ABI; returns the reply's length, or 0 when
    // the body has the wrong size (the client is then disconnected).
    std::size_t dispatch(Client& c, const shm::CtrlHeader& req, std::size_t body_len, FdList& fds,
                         bool fds_truncated, const StatusFn& status);
    // The cm_* ops; the reply's body length through `reply`.
    int dispatch_cm(Client& c, shm::CtrlOp op, const std::byte* in, std::size_t body_len,
                    FdList& fds, std::byte* out, std::size_t& reply, bool& malformed);
    std::size_t fill_clients(const Peer& asker, std::byte* body) const;
    std::size_t fill_resources(std::byte* body) const;
    // snicctl qp: a page of the QPs the client may see, and one QP in full (0 or ENOENT).
    std::size_t fill_qps(const Client& c, const std::byte* req, std::byte* body) const;
    int fill_qp(const Client& c, const std::byte* req, std::byte* body) const;

    std::string path_;
    mode_t mode_;
    Fd lock_;
    Fd listen_;
    // Kept open so that, out of descriptors (EMFILE), the server can still accept a waiting
    // connection and close it: the client hears a refusal instead of waiting, and the
    // listening socket does not stay readable (which would make the loop spin).
    Fd spare_;
    std::uint64_t shed_ = 0;      // connections closed for want of descriptors
    std::vector<std::byte> in_;   // one request
    std::vector<std::byte> out_;  // one reply
    // The sessions refer to these two: declared before the clients, destroyed after them.
    std::vector<DevicePort> devices_;
    Resources resources_;
    std::vector<std::unique_ptr<Client>> clients_;
    // Sessions whose clients went, taken apart kDismantlePerTurn objects a turn (oldest first)
    // so that requests are answered meanwhile.
    std::vector<std::unique_ptr<Session>> dying_;
    ControlQueue questions_;  // from other threads, answered in serve()
    CmService* cm_ = nullptr;
    std::vector<std::pair<int, std::function<void()>>> watched_;
    TcpRowsFn tcp_rows_;
    // check_links(): each port's link when last looked at (1 up, 0 down, -1 not yet), and when
    // to look again.
    std::vector<std::int8_t> link_up_;
    std::chrono::steady_clock::time_point next_link_check_{};
};

}  // namespace snic::daemon
