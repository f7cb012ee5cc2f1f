// The iWARP transport of one port (daemon/verbs/transport.h's second implementation): the port's
// iWARP device runs RDMAP/DDP (proto/iwarp/qp.h) over MPA (proto/iwarp/mpa.h) over snic's
// own TCP (daemon/iwarp/tcp_stream.h), on the port's lcore.
//
// Connections come first, QPs after, as on an iWARP RNIC: rdma_cm (daemon/cm_service) asks
// for a connection (connect(), or a listener's MPA request, answered by accept()/reject()),
// and libsnic binds the id's QP to it with a Modify QP to RTR naming the connection
// (shm::kQpAttrIwConn), which start() honours only for a connection of the same client that
// finished (active side) or received (passive side) its MPA exchange. From then on the
// connection's stream bytes go to the QP's engine and its FPDUs to the connection.
//
// A connection (IwConn) lives on the lcore: its TCP connection, its MPA negotiator and the
// receive buffers snic's TCP writes the stream into (four of 64 KiB, reposted as they are
// read: the window the peer sees). What the CM must hear (a request, a reply, a refusal, the
// end) crosses to the control thread through an SPSC queue and an eventfd, as QP1's MADs do
// (daemon/roce/gsi.h); the CM's calls reach the lcore through LcoreTasks.
//
// Setup (iwarp_transport.cc) on the control thread; the datapath
// (iwarp_transport_datapath.cc) on the lcore only: no allocation, syscalls, locks or logs but
// the eventfd signal of a connection's event.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/iwarp/tcp_service.h"
#include "daemon/iwarp/tcp_stream.h"
#include "daemon/lcore/lcore_tasks.h"
#include "daemon/lcore/spsc_queue.h"
#include "daemon/verbs/qp_runner.h"
#include "daemon/verbs/session.h"
#include "daemon/verbs/transport.h"
#include "proto/iwarp/mpa.h"
#include "proto/iwarp/qp.h"

namespace snic::daemon {

class IwarpTransport;
struct IwConn;

// A connection of one port's iWARP transport: index (low 16 bits) and generation (high 16),
// never 0, never valid once the connection is gone.
using IwConnId = std::uint32_t;

// What the CM hears of a connection (lcore -> control thread).
struct IwCmEvent {
    enum class Kind : std::uint8_t {
        request,       // passive: an MPA request came; accept() or reject()
        reply,         // active: the MPA reply accepted us; bind the QP, then confirm()
        rejected,      // active: the reply rejected us (its private data)
        refused,       // active: no connection (status: -ECONNRESET, -ETIMEDOUT, ...)
        disconnected,  // the connection ended after it was made (peer's close, terminate, error)
        gone,          // the connection is over for good: its id may forget it
    };
    Kind kind = Kind::request;
    IwConnId conn = 0;
    std::int32_t status = 0;
    std::uint32_t local_ip = 0, remote_ip = 0;  // host order
    std::uint16_t local_port = 0, remote_port = 0;
    std::uint16_t ird = 0, ord = 0;  // the peer's (request) or the agreed (reply)
    std::uint16_t pd_len = 0;
    std::array<std::uint8_t, iwarp::kMpaMaxPrivateData> pd{};
};

struct IwarpCounters {
    Counter connects, incoming, requests, replies, rejects_sent, rejects_received;
    Counter refused;       // active opens that found no connection
    Counter mpa_errors;    // MPA frames refused (ours or the peer's)
    Counter bound;         // QPs bound to connections
    Counter bind_refused;  // Modify QP to RTR naming no connection it may have
    Counter disconnects;   // connections ended after they were made
    Counter no_room;       // connections refused: the table is full
    Counter events_lost;   // the CM's queue was full
    Counter held_bytes;    // stream bytes that waited for their QP to be bound
    Counter mpa_timeouts;  // MPA exchanges that took too long (kMpa*WaitSeconds)
};

// The QP an iWARP QpEngine is: the glue, the engine, and the connection it was bound to (the
// engine's stream: its FPDUs go to the connection's TCP as records).
class IwarpQp final : public RunningQp, public iwarp::IwStream {
  public:
    IwarpQp(IwarpTransport& transport, Qp& qp, const NameTable& keys,
            const iwarp::IwConfig& config);
    ~IwarpQp() override;

    // QpEngine
    QpEngineView view() const override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // Schedulable
    bool sched_poll(std::uint64_t now_ns) override;
    std::uint64_t sched_deadline() const override { return engine_.next_deadline(); }

    // iwarp::IwStream
    bool send(std::span<const std::uint8_t> fpdu) override;

  private:
    friend class IwarpTransport;
    // The lcore, after each engine call: publishes a move to the error state, and closes the
    // stream once a Terminate went out.
    void note_state();

    IwarpTransport& transport_;
    IwConn* conn_ = nullptr;  // lcore: bound, until the connection or the QP goes
    iwarp::IwQp engine_;      // last: built from the interfaces above
};

// One iWARP connection on the lcore (daemon/iwarp/iwarp_transport_datapath.cc).
struct IwConn final : TcpStreamOwner {
    enum class State : std::uint8_t {
        connecting,        // active: TCP handshake
        awaiting_reply,    // active: MPA request sent
        awaiting_request,  // passive: TCP accepted, MPA request to come
        request_received,  // passive: the CM decides
        replied,           // passive: accepted; FPDUs flow once a QP is bound
        connected,         // active: the reply accepted us; FPDUs flow once a QP is bound
        closing,           // rejected, refused, disconnected: the TCP connection ends
    };

    IwConn(IwarpTransport& t, IwConnId i, bool a);
    void on_tcp_event(const TcpStreamEvent& e) override;

    IwarpTransport& transport;
    const IwConnId id;
    const bool active;
    State state = State::connecting;
    TcpHandle tcp;
    TcpFourTuple tuple;
    Peer owner{};
    bool has_owner = false;    // a client may bind a QP (its CM id's owner)
    bool cm_released = false;  // the CM forgot it: no more events
    bool ended = false;        // the TCP connection is over (terminal event, or aborted)
    bool peer_closed = false;  // it ended with the peer's FIN
    bool made = false;         // the MPA exchange succeeded: its end is a disconnect
    bool disconnect_told = false;
    bool binding = false;  // start() is binding a QP to it
    // Until when its MPA exchange may take (TSC): a peer that opens TCP and says nothing, or
    // never replies, does not hold a connection for ever. 0 once the frame came.
    std::uint64_t mpa_deadline = 0;
    bool tx_open = false;  // FPDUs may go (after our reply, or after the peer's)
    std::optional<iwarp::MpaInitiator> ini;
    std::optional<iwarp::MpaResponder> resp;
    iwarp::MpaResult result;
    IwarpQp* qp = nullptr;
    // The stream lands in kRxBuffers buffers of rx_buffer_bytes(): buffer number n (n = 0, 1,
    // ...) holds stream bytes [n * size, (n + 1) * size) in slot n % kRxBuffers, and is
    // posted again as n + kRxBuffers once read and returned.
    std::unique_ptr<std::uint8_t[]> rx;
    std::uint64_t received = 0;  // in-order stream bytes so far
    std::uint64_t consumed = 0;  // of those, read by MPA or the QP
    std::uint64_t next_repost = 0;
    std::uint32_t returned = 0;  // bit per slot: its buffer came back (recv_done)
};

class IwarpTransport final : public Transport, public TcpStreamOwner {
  public:
    // `tcp`: the port's TCP (its stack is used on the lcore only).
    IwarpTransport(LcoreTasks& tasks, const NameTable& keys, TcpService& tcp, std::uint64_t tsc_hz);
    ~IwarpTransport() override;
    IwarpTransport(const IwarpTransport&) = delete;
    IwarpTransport& operator=(const IwarpTransport&) = delete;

    // --- the CM (control thread) ---
    // Listens on TCP `port` (each call counts; unlisten() as often); 0 or an errno.
    int listen(std::uint16_t port, std::uint32_t backlog);
    void unlisten(std::uint16_t port);
    // Opens a connection to ip:port from local_port (0: ephemeral) and sends an MPA request
    // with `pd`, asking for IRD `ird` and ORD `ord`; `owner` may bind a QP to it.
    Result<IwConnId> connect(std::uint32_t ip, std::uint16_t port, std::uint16_t local_port,
                             std::span<const std::uint8_t> pd, std::uint16_t ird, std::uint16_t ord,
                             const Peer& owner);
    // A request's connection: whose QP may bind to it (the listener's owner).
    void set_owner(IwConnId conn, const Peer& owner);
    // Answers a request: the MPA reply with `pd`, our IRD and ORD. 0 or an errno.
    int accept(IwConnId conn, std::span<const std::uint8_t> pd, std::uint16_t ird,
               std::uint16_t ord);
    // Refuses a request with `pd` and closes.
    int reject(IwConnId conn, std::span<const std::uint8_t> pd);
    // Closes gracefully (FIN after what is queued); the end comes as `disconnected`.
    void disconnect(IwConnId conn);
    // The CM forgets the connection: aborted if it is still open and no QP runs on it.
    void release(IwConnId conn);
    // A port of several queues (the CM): whether this lane's TCP has a listener or a
    // connection on local port `port`; `port`'s segments to this lane from now on
    // (Port::claim_tcp_port); and the lane they go to now.
    bool uses_tcp_port(std::uint16_t port);
    void claim_tcp_port(std::uint16_t port) { tcp_.port().claim_tcp_port(port); }
    std::uint16_t tcp_port_lane(std::uint16_t port) const { return tcp_.port().tcp_lane(port); }
    // The events: readable fd, then take() until false.
    int fd() const { return wakeup_.fd(); }
    void clear_wakeup() { wakeup_.clear(); }
    bool take(IwCmEvent& out) { return events_.pop(out); }

    const IwarpCounters& counters() const { return counters_; }

    // Transport
    std::string_view name() const override { return "iwarp"; }
    void run(const std::function<void()>& fn) override { tasks_.run(fn); }
    const char* check_attr(std::uint32_t mask, const shm::QpAttr& a) const override;
    Result<std::unique_ptr<QpEngine>> start(Qp& qp) override;
    void start_sending(Qp& qp) override;
    void drain(Qp& qp) override;
    void resume(Qp& qp) override;
    void to_error(Qp& qp) override;
    void stop(std::span<Qp* const> qps) override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // --- the lcore ---
    bool poll(std::uint64_t now_tsc) override;
    // TcpStreamOwner: the listeners' incoming connections.
    void on_tcp_event(const TcpStreamEvent& e) override;

    // The receive buffers of a connection, the window its peer sees: kRxBuffers buffers of
    // a quarter of the TCP stack's receive window each (rounded down to a power of two).
    static constexpr std::uint32_t kRxBuffers = 4;
    std::uint32_t rx_buffer_bytes() const { return 1u << rx_shift_; }
    // How long a QP that did something stays on the ready list (as RoCE's).
    static constexpr std::uint64_t kGraceNs = 200'000;
    // How long a responder waits for the MPA request once TCP is up, and an initiator for TCP
    // to connect (Linux siw: 10 s); how long an initiator then waits for the reply, which
    // waits for the peer application's rdma_accept: a server that takes a thousand requests
    // one by one answers the last late (siw: 10 s, Chelsio's cxgb4: 60 s); how often the lcore
    // looks for those overdue.
    static constexpr double kMpaRequestWaitSeconds = 10.0;
    static constexpr double kMpaReplyWaitSeconds = 60.0;
    static constexpr double kMpaCheckSeconds = 0.1;

  private:
    friend class IwarpQp;
    friend struct IwConn;
    struct Listener {
        std::uint16_t port = 0;
        std::uint32_t refs = 0;
        TcpHandle handle;
    };

    TcpStack& stack() { return tcp_.stack(); }
    // The lcore: the connection `id` names, or nullptr.
    IwConn* find(IwConnId id) const;
    IwConn* make_conn(bool active);
    void free_conn(IwConn& c);
    // Queues an event for the CM (none once it released the connection).
    void emit(IwConn& c, IwCmEvent::Kind kind, std::int32_t status,
              std::span<const std::uint8_t> pd = {}, std::uint16_t ird = 0, std::uint16_t ord = 0);
    // Stream bytes received and not yet read, to MPA or to the QP.
    void pump(IwConn& c);
    bool on_reply(IwConn& c);
    bool on_request(IwConn& c);
    void on_conn_event(IwConn& c, const TcpStreamEvent& e);
    void peer_gone(IwConn& c, bool graceful, std::int32_t status);
    void post_buffers(IwConn& c);
    void repost(IwConn& c);
    // An MPA frame on a connection whose send buffer is empty: false when refused.
    bool send_frame(IwConn& c, std::span<const std::uint8_t> frame);
    // FIN after what is queued (once); the CM hears `disconnected` when it was made.
    void close_conn(IwConn& c);
    // Frees `c` once its TCP connection ended, the CM forgot it and no QP holds it.
    void maybe_free(IwConn& c);
    static IwarpQp& of(Qp& qp);
    // MPA revision 2 (RFC 6581) with CRCs required and markers never, IRD and ORD clamped to
    // 14 bits; a responder serves an initiator that sends an RTR first.
    static iwarp::MpaConfig mpa_config(std::uint16_t ird, std::uint16_t ord, bool responder);
    std::uint64_t now_ns() const { return runner_.ns(now_tsc_); }

    LcoreTasks& tasks_;
    const NameTable& keys_;
    TcpService& tcp_;
    const std::uint32_t rx_shift_;  // log2 of rx_buffer_bytes()
    QpRunner runner_;
    IwarpCounters counters_;
    // Ends the MPA exchanges that took too long.
    void expire_handshakes();
    // The control thread: why connect() found no room (ENOBUFS), also logged as a warning.
    std::string connections_full(std::uint32_t ip, TcpBound bound);

    const std::uint64_t mpa_request_tsc_, mpa_reply_tsc_, mpa_check_tsc_;
    std::uint64_t now_tsc_ = 0;
    std::uint64_t next_mpa_check_ = 0;
    std::vector<std::unique_ptr<IwConn>> conns_;  // lcore; max_connections entries
    std::vector<std::uint16_t> gens_;             // lcore
    std::vector<std::uint32_t> free_;             // lcore: the empty entries of conns_
    // The control thread: when connect() last warned of no room.
    std::chrono::steady_clock::time_point last_full_warning_{};
    std::vector<Listener> listeners_;  // lcore
    SpscQueue<IwCmEvent, 256> events_;
    Wakeup wakeup_;
};

}  // namespace snic::daemon
