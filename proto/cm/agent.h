// The communication manager agent (IBA vol 1 §12.9): the connection state machine of every
// connection and SIDR exchange of one CM endpoint, driven by the consumer's calls, received
// CM MADs and time. Pure: MADs leave and events arrive through a Sink, time is passed in as
// nanoseconds; no DPDK, no syscalls. The transitions are one table (agent.cc, kTransitions),
// described in docs/PROTOCOL-CM.md.
//
// Lifetime of a ConnId: every connection (active or passive) ends in TimeWait and is reported
// by timewait_exit, after which its id is free; rejected and unreachable connections also pass
// through TimeWait. A released connection (release()) gets no further events at all. SIDR ids
// end with sidr_rep_received / unreachable (active) or with sidr_reply() (passive).
//
// Events are delivered only from receive() and poll(), never from the consumer's own calls
// (accept, confirm, reject, disconnect, established, release); deliver() may call back into
// the Agent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"
#include "proto/crc/siphash.h"

namespace snic::cm {

using ConnId = std::uint32_t;  // 0 is never a valid id
inline constexpr std::uint32_t kGsiQpn = 1;
inline constexpr std::uint32_t kGsiQkey = 0x80010000;

// What REQ/REP carry about one side's QP. Each field keeps the message's meaning: the
// sender's resources, and local_ack_timeout is a REQ's primary Local ACK Timeout or a REP's
// Target ACK Delay (the consumer chooses both: libclient/cm_rules.h).
struct QpInfo {
    std::uint32_t qpn = 0;
    std::uint32_t psn = 0;  // starting PSN (24 bits)
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t flow_control = 0;
    std::uint8_t retry_count = 7;
    std::uint8_t rnr_retry_count = 7;
    std::uint8_t srq = 0;
    std::uint8_t path_mtu = 3;  // ibv_mtu enum value (1=256 .. 5=4096)
    std::uint8_t local_ack_timeout = 14;
    std::uint8_t qp_type = 2;  // ibv_qp_type: IBV_QPT_RC=2, IBV_QPT_UC=3
    std::uint8_t traffic_class = 0;
    std::uint32_t qkey = 0;  // SIDR
};

struct ConnectParams {
    std::uint32_t local_ip = 0, remote_ip = 0;  // IPv4, host order (local 0: the agent's)
    std::uint64_t service_id = 0;
    QpInfo qp;
    std::uint8_t cm_response_timeout = 20;  // exponent: 4.096 us * 2^t
    std::uint8_t max_cm_retries = 15;
    std::uint32_t flow_label = 0;                // the primary path's, 20 bits (cma.h)
    std::span<const std::uint8_t> private_data;  // <= 92, copied
};

enum class EventType : std::uint8_t {
    req_received,   // passive: a new connection (its ConnId is new); answer accept() or reject()
    rep_received,   // active: answer confirm() (sends RTU) or reject()
    established,    // passive: RTU (or the first data: the daemon may call established())
    rejected,       // REJ received; reject_reason set
    unreachable,    // REQ/REP retries exhausted (no answer)
    dreq_received,  // peer disconnects: the agent already answered with DREP
    disconnected,   // our DREQ was answered by DREP, or timed out
    timewait_exit,  // the connection left TimeWait; its ConnId is free after this event
    sidr_req_received,
    sidr_rep_received,
};

struct Event {
    EventType type;
    ConnId id;
    std::uint64_t service_id;
    std::uint32_t local_ip, remote_ip;
    QpInfo peer;                      // REQ / REP / SIDR_REP contents
    std::uint16_t reject_reason = 0;  // IBA table 112 code
    std::uint8_t sidr_status = 0;
    std::span<const std::uint8_t> private_data;  // valid during deliver() only
};

class Sink {
  public:
    virtual ~Sink() = default;
    // One MAD to the peer's GSI QP (qpn kGsiQpn, qkey kGsiQkey); may be lost.
    virtual void send_mad(std::uint32_t remote_ip, std::uint32_t remote_qpn, std::uint32_t qkey,
                          std::span<const std::uint8_t> mad) = 0;
    virtual void deliver(const Event& e) = 0;
};

// The local communication ID for count `x`: a keyed permutation of the 32-bit numbers.
std::uint32_t permute_id(const SipKey& key, std::uint32_t x);

struct AgentConfig {
    std::uint32_t local_ip = 0;
    std::uint32_t max_half_open =
        256;  // REQs received and not yet answered/established, and REQs sent not answered
    std::uint64_t timewait_ns = 1'000'000'000;  // time in TimeWait
    // The secret behind local communication IDs (a keyed permutation of a counter): IDs a
    // peer saw tell it nothing of the next ones or of other connections' (the daemon draws
    // the key from getrandom).
    SipKey id_key{};
    std::uint8_t local_cm_response_timeout = 20;
    std::uint8_t max_cm_retries = 15;
    std::uint64_t ca_guid = 0;  // the local CA GUID in REQ/REP; 0: derived from local_ip
    std::uint8_t mra_service_timeout = 24;  // what our MRAs promise: 4.096 us * 2^t
};

// The connection states of IBA §12.9.6 (Linux's ib_cm_state names, without LISTEN, which is
// the daemon's listener table). DREQ Rcvd is not a state here: the agent answers a DREQ at
// once.
enum class State : std::uint8_t {
    idle,
    req_sent,
    mra_req_rcvd,  // REQ sent, MRA received: REP Wait
    req_rcvd,
    mra_req_sent,
    rep_sent,
    mra_rep_rcvd,
    rep_rcvd,
    mra_rep_sent,
    established,
    dreq_sent,
    timewait,
    sidr_req_sent,
    sidr_req_rcvd,
    count_,
};
inline constexpr std::size_t kStates = static_cast<std::size_t>(State::count_);
std::string_view state_name(State s);

// The CM messages by attribute (messages.h has the codecs); index of per-message counters.
enum class MsgType : std::uint8_t {
    req,
    mra,
    rej,
    rep,
    rtu,
    dreq,
    drep,
    sidr_req,
    sidr_rep,
    lap,
    apr,
    count_,
};
inline constexpr std::size_t kMsgTypes = static_cast<std::size_t>(MsgType::count_);

// Why a received MAD was counted in mads_bad and dropped.
enum class RxDrop : std::uint8_t {
    bad_mad,        // the common MAD header: size, base version, class, class version, method
    bad_attribute,  // an attribute ID that is not a CM message this agent knows
    bad_message,    // the message's own fields do not decode (reserved values, lengths)
    unknown_conn,   // no connection has the comm IDs the message names
    wrong_state,    // the connection is in a state where the message has no meaning
    count_,
};
inline constexpr std::size_t kRxDrops = static_cast<std::size_t>(RxDrop::count_);
std::string_view rx_drop_name(RxDrop d);

struct AgentCounters {
    std::uint64_t mads_rx = 0, mads_tx = 0, mads_bad = 0;
    std::uint64_t retransmits = 0;        // REQ, REP, DREQ, SIDR_REQ sent again on a timer
    std::uint64_t duplicates = 0;         // a request seen again (answered from state)
    std::uint64_t stale = 0;              // stale connections found (REJ reason 10 sent)
    std::uint64_t half_open_refused = 0;  // REQs refused (sent or received) by max_half_open
    // Passive connections given up to make room for a REQ: the oldest still waiting for the
    // peer's RTU (REJ 4 sent, the consumer told unreachable).
    std::uint64_t half_open_evicted = 0;
    std::array<std::uint64_t, kMsgTypes> rx{}, tx{};  // by MsgType
    std::array<std::uint64_t, kRxDrops> drops{};      // by RxDrop; they sum to mads_bad
};

class Agent {
  public:
    Agent(Sink& sink, AgentConfig config);
    ~Agent();
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    Result<ConnId> connect(const ConnectParams& p, std::uint64_t now);  // REQ
    // REP (after req_received).
    Status accept(ConnId id, const QpInfo& qp, std::span<const std::uint8_t> private_data,
                  std::uint64_t now);
    // RTU (after rep_received) -> established on our side.
    Status confirm(ConnId id, std::span<const std::uint8_t> private_data, std::uint64_t now);
    // REJ (after req_received or rep_received).
    Status reject(ConnId id, std::uint16_t reason, std::span<const std::uint8_t> private_data,
                  std::uint64_t now);
    // DREQ when established; no-op success if already disconnecting.
    Status disconnect(ConnId id, std::span<const std::uint8_t> private_data, std::uint64_t now);
    // Passive side saw data before RTU (IBA allows): REP Sent -> Established, no event.
    void established(ConnId id, std::uint64_t now);
    // A REQ received and not yet answered is forgotten without a word (no REJ, no MRA), as
    // Linux's CM forgets one whose consumer could not take it (a full listen backlog): the
    // peer's next REQ comes as a new one. EINVAL in any other state.
    Status discard(ConnId id, std::uint64_t now);
    // The consumer forgets the connection: a REQ or REP received and not answered -> REJ
    // reason 28 (consumer reject); a REQ or REP sent and not answered -> REJ reason 4
    // (timeout); established -> DREQ. No further events for it; its state is reclaimed after
    // TimeWait internally.
    void release(ConnId id, std::uint64_t now);
    // The address the agent's connections are on from here on (AgentConfig::local_ip); those
    // it holds keep theirs.
    void set_local_ip(std::uint32_t ip) { config_.local_ip = ip; }
    Result<ConnId> sidr_request(std::uint32_t local_ip, std::uint32_t remote_ip,
                                std::uint64_t service_id,
                                std::span<const std::uint8_t> private_data, std::uint8_t timeout,
                                std::uint8_t retries, std::uint64_t now);
    Status sidr_reply(ConnId id, std::uint8_t status, std::uint32_t qpn, std::uint32_t qkey,
                      std::span<const std::uint8_t> private_data, std::uint64_t now);
    void receive(std::uint32_t src_ip, std::uint32_t src_qpn, std::span<const std::uint8_t> mad,
                 std::uint64_t now);
    void poll(std::uint64_t now);         // timers: retransmissions, TimeWait, DREQ timeout
    std::uint64_t next_deadline() const;  // UINT64_MAX when none
    const AgentCounters& counters() const { return counters_; }

    // Connections by state, for snicctl: fn(name, count) once per State, in enum order.
    void for_each_state(const std::function<void(std::string_view, std::size_t)>& fn) const;
    std::size_t count_in_state(State s) const;
    State state_of(ConnId id) const;  // State::idle for an unknown id
    // The peer's communication ID of `id` as the agent matches its messages against it, once
    // the peer's REQ or REP has named it (a SIDR request received: its request ID); nullopt
    // before that and for an unknown id. For checks and tools (the cm_agent fuzz target).
    std::optional<std::uint32_t> peer_comm_id(ConnId id) const;
    std::size_t half_open() const { return half_open_; }

    struct Conn;  // agent.cc

  private:
    // The receive handlers and the transition table's actions (agent.cc).
    friend struct Actions;
    friend struct Receivers;

    Conn* find(ConnId id);
    const Conn* find(ConnId id) const;

    Sink& sink_;
    AgentConfig config_;
    std::uint64_t ca_guid_;
    std::uint32_t id_seq_ = 0;  // IDs drawn so far: the permutation's input
    std::uint32_t tid_seq_ = 0;
    std::unordered_map<ConnId, std::unique_ptr<Conn>> conns_;
    std::map<std::pair<std::uint32_t, std::uint32_t>, ConnId> by_remote_;  // (ip, comm id)
    std::map<std::pair<std::uint32_t, std::uint32_t>, ConnId> by_qpn_;     // (ip, remote QPN)
    std::map<std::pair<std::uint32_t, std::uint32_t>, ConnId> by_sidr_;    // (ip, request ID)
    std::set<std::pair<std::uint64_t, ConnId>> timers_;
    std::array<std::size_t, kStates> in_state_{};
    std::size_t half_open_ = 0;
    // Passive connections in the order they sent their REP (entries of those no longer
    // waiting for an RTU are dropped as they reach the front): a full half-open table gives
    // up the oldest for a new REQ, so that a flood of REQs that never confirm cannot keep a
    // peer that does from connecting.
    std::deque<ConnId> unconfirmed_;
    AgentCounters counters_;
};

}  // namespace snic::cm
