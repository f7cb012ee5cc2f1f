// The byte-stream API the daemon's own users (the iWARP layer, the TCP self-tests) have of
// snic's TCP on one port. Not exposed to clients. Every call is made on the port's lcore,
// which also delivers every event; nothing blocks, allocates per segment or logs.
//
//   listen(port, backlog, owner)  -> a listener handle; `incoming` events bring connections
//   connect(ip, port, owner)      -> a connection handle; `connected` (or a terminal event)
//   accept(conn, owner)           takes an `incoming` connection: its events go to `owner`
//   send(conn, record)            queues one record whole or refuses it whole (the record
//                                 rule of proto/tcp/connection.h: an FPDU of mss() bytes
//                                 travels alone and whole); false: `send_space` will come
//   post_receive(conn, buf, cookie)  the next bytes of the stream land in `buf` in place (no
//                                 copy); `readable` says how many in-order bytes exist,
//                                 `recv_done` returns a full (or final) buffer
//   close(h)                      a connection: FIN after the queued records. A listener:
//                                 stops listening and aborts the connections not accepted
//   abort(h)                      a connection: RST now; no event reaches its owner after
//
// mss() is read at `connected` (or accept) and again at every `mss_changed`: an ICMP
// fragmentation needed (RFC 1191) can lower it while the connection lives. Records queued
// before are still sent whole in order, split to the new MSS where they no longer fit one
// segment; records sized to the new mss() travel alone and whole again.
// Every connection ends with exactly one terminal event (closed, reset, timed_out,
// unreachable), after which its handle is stale: calls with it fail (EBADF) and never touch
// another connection. Buffers posted to a connection stay the caller's to keep valid until
// their `recv_done` (every posted buffer gets one, before the terminal event) or abort().
// The window offered is the room posted: a connection with no buffer posted (one not yet
// accepted, or whose owner fell behind) offers none, and the peer's data and even its FIN
// wait (RFC 9293 §3.10.7.4) until a buffer is posted.
// An owner is called from inside the stack (a segment's arrival, a timer): it may call any
// of the functions above from its callback.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "proto/net/addr.h"
#include "proto/tcp/tcp.h"

namespace snic::daemon {

// A connection or listener of one stack: an index and a generation, never valid once its
// object is gone. 0 is never a handle.
struct TcpHandle {
    std::uint32_t value = 0;
    explicit operator bool() const { return value != 0; }
    friend constexpr bool operator==(TcpHandle, TcpHandle) = default;
};

enum class TcpStreamEventKind : std::uint8_t {
    incoming,     // listener: `conn` reached ESTABLISHED and waits for accept()
    connected,    // ESTABLISHED (active open)
    readable,     // `bytes`: in-order bytes received so far
    recv_done,    // a posted buffer is returned: `cookie`, `bytes` placed in it
    send_space,   // send() refused a record earlier and there is room again
    peer_closed,  // the peer's FIN: no more bytes will come
    closed,       // terminal: the connection is over (orderly)
    reset,        // terminal: the peer reset it (an active open refused: RST to our SYN)
    timed_out,    // terminal: retransmissions or SYN retries ran out (RST sent)
    unreachable,  // terminal: ICMP destination unreachable (port, protocol, host) to our SYN
    mss_changed,  // path MTU discovery lowered mss(): `bytes` is the new one (see below)
};
inline constexpr std::array<std::string_view, 11> kTcpStreamEventNames = {
    "incoming", "connected", "readable",  "recv_done",   "send_space",  "peer_closed",
    "closed",   "reset",     "timed_out", "unreachable", "mss_changed",
};
constexpr bool is_terminal(TcpStreamEventKind k) {
    return k == TcpStreamEventKind::closed || k == TcpStreamEventKind::reset ||
           k == TcpStreamEventKind::timed_out || k == TcpStreamEventKind::unreachable;
}

struct TcpStreamEvent {
    TcpStreamEventKind kind = TcpStreamEventKind::connected;
    TcpHandle conn;            // the connection it is about
    TcpHandle listener;        // incoming: the listener that took it
    std::uint64_t cookie = 0;  // recv_done
    std::uint64_t bytes = 0;   // recv_done, readable
};

// Who gets a connection's or a listener's events.
class TcpStreamOwner {
  public:
    virtual void on_tcp_event(const TcpStreamEvent& e) = 0;

  protected:
    ~TcpStreamOwner() = default;
};

// The two ends of a connection, IPv4 (the daemon's ports are IPv4).
struct TcpFourTuple {
    net::Ipv4Addr local_ip, remote_ip;
    std::uint16_t local_port = 0, remote_port = 0;
};

// The API. Errors are errno values: EBADF (stale handle), EADDRINUSE (a listener or
// connection holds the port or 4-tuple), ENOBUFS (the stack's bounds: connections,
// listeners, per-peer), EINVAL (a bad argument or the wrong kind of handle), ENETUNREACH
// (not on the port's subnet), EISCONN (accept of an accepted connection).
class TcpStreams {
  public:
    virtual int listen(std::uint16_t port, std::uint32_t backlog, TcpStreamOwner& owner,
                       TcpHandle& out) = 0;
    // local_port 0: an ephemeral port.
    virtual int connect(net::Ipv4Addr ip, std::uint16_t port, TcpStreamOwner& owner, TcpHandle& out,
                        std::uint16_t local_port = 0) = 0;
    virtual int accept(TcpHandle conn, TcpStreamOwner& owner) = 0;
    virtual bool send(TcpHandle conn, std::span<const std::byte> record) = 0;
    virtual bool post_receive(TcpHandle conn, std::span<std::byte> buffer,
                              std::uint64_t cookie) = 0;
    virtual void close(TcpHandle h) = 0;
    virtual void abort(TcpHandle h) = 0;

    // Views of a live connection (zero / false for a stale handle).
    virtual std::uint32_t mss(TcpHandle conn) const = 0;
    virtual std::size_t send_space(TcpHandle conn) const = 0;
    virtual std::uint64_t received(TcpHandle conn) const = 0;
    virtual bool info(TcpHandle conn, tcp::TcpInfo& out) const = 0;
    virtual bool four_tuple(TcpHandle conn, TcpFourTuple& out) const = 0;
    virtual const tcp::TcpCounters* counters(TcpHandle conn) const = 0;

  protected:
    ~TcpStreams() = default;
};

}  // namespace snic::daemon
