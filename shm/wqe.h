// The daemon<->client data path layouts: work queue entries, completion
// entries, async events, and where each object's rings sit in its memfd.
// The client creates each memfd, formats its rings (shm/ring.h) and passes it
// to snicd; snicd attaches and validates, and copies every entry out of shared
// memory before it looks at it (never trust shared memory twice).
//
// Numeric values of opcodes, statuses, flags and states are those of the IBA
// and of libibverbs (ibv_wr_opcode, ibv_wc_status, ...), so that libsnic maps
// them with a cast; libsnic static_asserts that they agree.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shm/ring.h"

namespace snic::shm {

inline constexpr std::uint32_t kMaxSge = 16;      // per send or receive WQE
inline constexpr std::uint32_t kMaxInline = 256;  // bytes of inline data per send WQE
inline constexpr std::size_t kPageSize = 4096;    // layout granule of the memfds

struct Sge {
    std::uint64_t addr;
    std::uint32_t length;
    std::uint32_t lkey;
};
static_assert(sizeof(Sge) == 16);

// ibv_wr_opcode values.
enum class WrOpcode : std::uint8_t {
    rdma_write = 0,
    rdma_write_imm = 1,
    send = 2,
    send_imm = 3,
    rdma_read = 4,
    atomic_cmp_swp = 5,
    atomic_fetch_add = 6,
    local_inv = 7,
    bind_mw = 8,
    send_inv = 9,
};

// SendWqe::flags (ibv_send_flags: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8).
inline constexpr std::uint8_t kWqeFence = 1;
inline constexpr std::uint8_t kWqeSignaled = 2;
inline constexpr std::uint8_t kWqeSolicited = 4;
inline constexpr std::uint8_t kWqeInline = 8;

// The operation's own fields, 24 bytes after the WQE's header, so that the first SGE (or the
// first 16 inline bytes) shares the WQE's first cache line: a WQE with one SGE is one line.
struct WqeRdma {  // rdma_write(_imm), rdma_read
    std::uint64_t remote_addr;
    std::uint32_t rkey;
    std::uint32_t reserved;
    std::uint64_t reserved2;
};
struct WqeAtomic {  // atomic_cmp_swp, atomic_fetch_add; the rkey is in SendWqe::ex
    std::uint64_t remote_addr;
    std::uint64_t compare_add;
    std::uint64_t swap;
};
struct WqeBind {              // bind_mw; the length is in SendWqe::bind_length
    std::uint32_t mw_handle;  // the window, as the client's handle
    std::uint32_t new_rkey;   // the rkey the window takes once bound
    std::uint32_t mr_lkey;    // the MR it is bound to
    std::uint32_t access;     // ibv_access_flags
    std::uint64_t addr;
};
struct WqeUd {                  // send, send_imm on a UD QP
    std::uint8_t dgid[16];      // the address handle's destination GID (::ffff:a.b.c.d)
    std::uint32_t remote_qpn;   // 24 bits
    std::uint32_t remote_qkey;  // high bit set: the QP's own Q_Key (controlled Q_Key)
};

struct SendWqe {
    std::uint64_t wr_id;
    std::uint8_t opcode;  // WrOpcode
    std::uint8_t flags;   // kWqe*
    std::uint8_t num_sge;
    std::uint8_t reserved0;
    // imm_data (network order, as posted), the rkey to invalidate, or an atomic's rkey
    std::uint32_t ex;
    std::uint32_t inline_length;
    std::uint32_t seq;  // the ring's publication tag (shm/ring.h): the producer writes it last
    union {
        WqeRdma rdma;
        WqeAtomic atomic;
        WqeBind bind;
        WqeUd ud;
    };
    union {
        Sge sge[kMaxSge];
        std::uint8_t inline_data[kMaxInline];
        std::uint64_t bind_length;  // a bind has no SGEs
    };
    std::uint8_t reserved1[16];

    // The bytes in use, from the first line: the ring copies only these, and at least that
    // line (a SEND with one SGE, or up to 16 inline bytes, crosses between the cores as one
    // line; a bind's length is in it too).
    std::size_t used_bytes() const noexcept {
        return offsetof(SendWqe, sge) +
               ((flags & kWqeInline) != 0 ? std::size_t{inline_length} : num_sge * sizeof(Sge));
    }
};
static_assert(sizeof(SendWqe) == 64 + kMaxSge * sizeof(Sge));
static_assert(offsetof(SendWqe, sge) == 48 && SizedEntry<SendWqe>);
static_assert(offsetof(SendWqe, sge) + sizeof(Sge) == kRingCacheLine);
static_assert(offsetof(SendWqe, seq) == 20 && offsetof(SendWqe, rdma) == 24);
static_assert(sizeof(WqeRdma) == 24 && sizeof(WqeAtomic) == 24 && sizeof(WqeBind) == 24 &&
              sizeof(WqeUd) == 24);
static_assert(std::is_trivially_copyable_v<SendWqe>);

struct RecvWqe {
    std::uint64_t wr_id;
    std::uint32_t num_sge;
    std::uint32_t seq;  // the ring's publication tag (shm/ring.h): the producer writes it last
    Sge sge[kMaxSge];

    // The bytes in use (the header and num_sge SGEs); the ring copies at least the first line.
    std::size_t used_bytes() const noexcept {
        return offsetof(RecvWqe, sge) + std::size_t{num_sge} * sizeof(Sge);
    }
};
static_assert(sizeof(RecvWqe) == 16 + kMaxSge * sizeof(Sge) && SizedEntry<RecvWqe>);
static_assert(offsetof(RecvWqe, seq) == 12);

// CQE: ibv_wc in a fixed layout. status, opcode and wc_flags hold ibv_wc_status,
// ibv_wc_opcode and ibv_wc_flags values; wc_flags' top bit (kCqeSolicited) is snic's own.
struct Cqe {
    std::uint64_t wr_id;
    std::uint8_t status;
    std::uint8_t opcode;
    std::uint8_t wc_flags;
    std::uint8_t sl;
    std::uint32_t byte_len;
    std::uint32_t ex;  // imm_data (network order) or the invalidated rkey
    std::uint32_t qp_num;
    std::uint32_t src_qp;
    std::uint32_t vendor_err;
    std::uint16_t pkey_index;
    std::uint16_t slid;
    std::uint8_t dlid_path_bits;
    std::uint8_t reserved[3];
    std::uint64_t timestamp;
    std::uint64_t reserved2;
    std::uint32_t reserved3;
    std::uint32_t seq;  // the ring's publication tag (shm/ring.h), last in the line, written last
};
static_assert(sizeof(Cqe) == 64 && SequencedEntry<Cqe> && offsetof(Cqe, seq) == 60);

// Cqe::wc_flags: a receive completion whose message asked for a solicited event. libsnic
// strips it from ibv_wc, or reports it as SNIC_WC_SOLICITED on a CQ that asked for it.
inline constexpr std::uint8_t kCqeSolicited = 0x80;

// An asynchronous event (ibv_event_type) about one object of the context.
struct AsyncEvent {
    std::uint32_t type;    // ibv_event_type
    std::uint32_t handle;  // the object's handle (QP, CQ, SRQ) or the port number
};
static_assert(sizeof(AsyncEvent) == 8);

// Shared words at the start of a CQ's memfd.
struct CqControl {
    // Written by the client (ibv_req_notify_cq), taken by snicd with an atomic
    // exchange when it posts a CQE: 0 not armed, kArmNext or kArmSolicited.
    std::uint32_t arm;
    std::uint32_t overflow;  // set by snicd when a CQE found the ring full
    std::uint8_t pad[56];
};
inline constexpr std::uint32_t kArmNext = 1;
inline constexpr std::uint32_t kArmSolicited = 2;
static_assert(sizeof(CqControl) == 64);

// A QP's receive counters (libsnic's snic_query_qp_recv), published by snicd as it works:
// `taken`, the receive WQEs the QP took (from its RQ or its SRQ) for arriving messages, or to
// flush them from its own RQ; `completed`, the receive completions made for the QP (successful,
// in error or flushed). A WQE is counted taken before its completion is counted, so every
// published pair has taken >= completed. A seqlock with one writer (the lcore that produces
// the QP's CQEs): `seq` is odd while a pair is written, and a reader that saw the same even
// `seq` before and after reading both values holds a pair that was published.
struct QpRecvCounters {
    std::uint32_t seq;
    std::uint32_t reserved;
    std::uint64_t taken;
    std::uint64_t completed;
};
static_assert(sizeof(QpRecvCounters) == 24);

// snicd: publishes (taken, completed). `seq` is the writer's private copy of the sequence (the
// shared one is written, never read back).
inline void publish_recv_counters(QpRecvCounters& shared, std::uint32_t& seq, std::uint64_t taken,
                                  std::uint64_t completed) noexcept {
    std::atomic_ref<std::uint32_t>(shared.seq).store(++seq, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::atomic_ref<std::uint64_t>(shared.taken).store(taken, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(shared.completed).store(completed, std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(shared.seq).store(++seq, std::memory_order_release);
}

// The client: one attempt at a consistent pair; false when snicd was writing (try again).
inline bool read_recv_counters(QpRecvCounters& shared, std::uint64_t& taken,
                               std::uint64_t& completed) noexcept {
    const std::uint32_t before =
        std::atomic_ref<std::uint32_t>(shared.seq).load(std::memory_order_acquire);
    if ((before & 1) != 0) return false;
    taken = std::atomic_ref<std::uint64_t>(shared.taken).load(std::memory_order_relaxed);
    completed = std::atomic_ref<std::uint64_t>(shared.completed).load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return std::atomic_ref<std::uint32_t>(shared.seq).load(std::memory_order_relaxed) == before;
}

// Shared words at the start of a QP's memfd, written by snicd only. Two lines: the first holds
// what the client reads on every post and snicd writes seldom (the state, `sleeping`); the
// second what snicd writes on every completion and the client reads seldom (the counters), so
// that a completion does not take from the client's core the line its next post reads.
struct alignas(kRingCacheLine) QpControl {
    std::uint32_t state;  // QpState: the client reads it to see an asynchronous move to ERR
    // Nonzero while snicd does not watch the QP's send queue: a client that pushed send WQEs
    // then rings the QP's doorbell (ring_doorbell below). snicd stores it and then reads the
    // seq of the send ring's next slot; the client stores its WQEs' seqs and then reads it;
    // both put a full fence between the two, so that one of them sees the other's store.
    std::uint32_t sleeping;
    std::uint8_t pad0[56];
    QpRecvCounters recv;  // at offset 64; its 64-bit words 8-byte aligned
    // Ring indices up to which snicd is done with the QP's WQEs: every send WQE before
    // `sq_done` (taken and completed, signaled or not, flushed, or dropped by Reset), and every
    // receive WQE of its own RQ before `rq_done` (not used with an SRQ). What lies between
    // them and the client's producer indices is outstanding: if snicd dies, libsnic completes
    // exactly those WQEs with IBV_WC_WR_FLUSH_ERR, as an RNIC does on a fatal error.
    std::uint32_t sq_done;
    std::uint32_t rq_done;
    std::uint8_t pad1[32];
};
static_assert(sizeof(QpControl) == 2 * kRingCacheLine && offsetof(QpControl, recv) == 64);
static_assert(offsetof(QpControl, sq_done) == 88);

// ---- doorbells ---------------------------------------------------------------------------------

// A context's doorbells (one per session, in its context memfd): one bit per QP, at the QP's
// doorbell index (CreateQpReply::doorbell). A client thread that posted send WQEs to a QP whose
// QpControl::sleeping is set sets the QP's bit, then the summary bit of the bit's group of
// words; snicd reads the summary word every turn of its loop and takes what is set with an
// exchange, so that an idle context costs it one load and a hostile one at most a scan of
// this area.
inline constexpr std::uint32_t kDoorbellBits = 16384;  // as many as QP number slots
inline constexpr std::uint32_t kDoorbellWords = kDoorbellBits / 64;
inline constexpr std::uint32_t kDoorbellGroup = kDoorbellWords / 64;  // words per summary bit

struct Doorbells {
    std::uint64_t summary;  // bit i: words [i * kDoorbellGroup, (i + 1) * kDoorbellGroup) of
                            // `bits` may have bits set
    std::uint8_t pad[56];
    std::uint64_t bits[kDoorbellWords];
};
static_assert(sizeof(Doorbells) == 64 + kDoorbellBits / 8);
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);

// The client: the QP at `index` has new send WQEs (after their producer index was stored and
// a full fence). Several threads may ring doorbells of one context at once.
inline void ring_doorbell(Doorbells& d, std::uint32_t index) noexcept {
    index %= kDoorbellBits;
    const std::uint32_t word = index / 64;
    std::atomic_ref<std::uint64_t>(d.bits[word])
        .fetch_or(std::uint64_t{1} << (index % 64), std::memory_order_release);
    std::atomic_ref<std::uint64_t>(d.summary).fetch_or(std::uint64_t{1} << (word / kDoorbellGroup),
                                                       std::memory_order_release);
}

// snicd: takes every rung doorbell and calls fn(index) for each (index < kDoorbellBits,
// whatever the client wrote). A bit rung while this runs is taken now or on the next call:
// the client sets the word before its summary bit, and a word is taken only after its summary
// bit was. Returns the number of bits taken.
template <class F>
std::uint32_t take_doorbells(Doorbells& d, F&& fn) noexcept {
    std::atomic_ref<std::uint64_t> summary(d.summary);
    if (summary.load(std::memory_order_relaxed) == 0) return 0;
    std::uint32_t n = 0;
    for (std::uint64_t groups = summary.exchange(0, std::memory_order_acquire); groups != 0;
         groups &= groups - 1) {
        const auto g = static_cast<std::uint32_t>(std::countr_zero(groups));
        for (std::uint32_t w = g * kDoorbellGroup; w < (g + 1) * kDoorbellGroup; ++w) {
            std::atomic_ref<std::uint64_t> word(d.bits[w]);
            if (word.load(std::memory_order_relaxed) == 0) continue;
            for (std::uint64_t bits = word.exchange(0, std::memory_order_acquire); bits != 0;
                 bits &= bits - 1, ++n)
                fn(w * 64 + static_cast<std::uint32_t>(std::countr_zero(bits)));
        }
    }
    return n;
}

// Where the parts of an object's memfd lie. Both sides compute it from the
// capacities in the create request; snicd checks the memfd is at least `bytes`.
struct Layout {
    std::size_t control;  // offset of the control block (CqControl, QpControl), 0
    std::size_t ring0;    // CQ: CQEs; QP: send queue; SRQ: receive queue; channel/async: events
    std::size_t ring1;    // QP without SRQ: receive queue; otherwise 0
    std::size_t bytes;    // total, a multiple of kPageSize
};

constexpr std::size_t round_up(std::size_t n, std::size_t to) {
    return (n + to - 1) / to * to;
}

constexpr Layout cq_layout(std::uint32_t capacity) {
    const std::size_t ring0 = kRingCacheLine * 4;  // after the control block, line aligned
    return {0, ring0, 0, round_up(ring0 + ring_bytes<Cqe>(capacity), kPageSize)};
}

constexpr Layout qp_layout(std::uint32_t sq_capacity, std::uint32_t rq_capacity) {
    const std::size_t ring0 = kRingCacheLine * 4;
    const std::size_t ring1 =
        rq_capacity == 0 ? 0 : round_up(ring0 + ring_bytes<SendWqe>(sq_capacity), kRingCacheLine);
    const std::size_t end = rq_capacity == 0 ? ring0 + ring_bytes<SendWqe>(sq_capacity)
                                             : ring1 + ring_bytes<RecvWqe>(rq_capacity);
    return {0, ring0, ring1, round_up(end, kPageSize)};
}

static_assert(qp_layout(1, 1).ring0 >= sizeof(QpControl));

constexpr Layout srq_layout(std::uint32_t capacity) {
    return {0, 0, 0, round_up(ring_bytes<RecvWqe>(capacity), kPageSize)};
}

// A completion channel's or a context's async events: one ring of 32-bit CQ
// handles (channel) or AsyncEvent (async), from offset 0.
constexpr Layout channel_layout(std::uint32_t capacity) {
    return {0, 0, 0, round_up(ring_bytes<std::uint32_t>(capacity), kPageSize)};
}
constexpr Layout async_layout(std::uint32_t capacity) {
    return {0, 0, 0, round_up(ring_bytes<AsyncEvent>(capacity), kPageSize)};
}

// Ring capacities. libsnic sizes each ring by these rules and snicd checks the request by the
// same ones: a power of two, enough for the entries asked for (a CQ one more, so that a full
// CQ is told apart from an empty one), within the daemon's bound.
constexpr std::uint32_t pow2_at_least(std::uint64_t n) {
    std::uint64_t p = 1;
    while (p < n) p <<= 1;
    return p > (std::uint64_t{1} << 31) ? 0 : static_cast<std::uint32_t>(p);
}
constexpr bool is_pow2(std::uint32_t v) {
    return v != 0 && (v & (v - 1)) == 0;
}

// The capacity of a send, receive or shared receive queue for max_wr WRs (0: too many).
constexpr std::uint32_t wq_capacity_for(std::uint32_t max_wr) {
    return pow2_at_least(max_wr == 0 ? 1 : max_wr);
}
constexpr bool wq_capacity_ok(std::uint32_t capacity, std::uint32_t max_wr, std::uint32_t bound) {
    return is_pow2(capacity) && capacity >= max_wr && capacity <= bound;
}
// The capacity of a CQ for cqe completions (0: too many).
constexpr std::uint32_t cq_capacity_for(std::uint32_t cqe) {
    return pow2_at_least(std::uint64_t{cqe} + 1);
}
constexpr bool cq_capacity_ok(std::uint32_t capacity, std::uint32_t cqe, std::uint32_t bound) {
    return is_pow2(capacity) && capacity > cqe && capacity <= bound;
}
static_assert(wq_capacity_ok(wq_capacity_for(100), 100, 1024) && wq_capacity_for(128) == 128);
static_assert(cq_capacity_ok(cq_capacity_for(127), 127, 1024) && cq_capacity_for(128) == 256);

// A context's memfd (open_device): its async events ring, then its doorbells.
struct ContextLayout {
    std::size_t events;     // the AsyncEvent ring
    std::size_t doorbells;  // Doorbells, cache line aligned
    std::size_t bytes;      // total, a multiple of kPageSize
};
constexpr ContextLayout context_layout(std::uint32_t async_capacity) {
    const std::size_t doorbells = round_up(ring_bytes<AsyncEvent>(async_capacity), kRingCacheLine);
    return {0, doorbells, round_up(doorbells + sizeof(Doorbells), kPageSize)};
}

inline constexpr std::uint32_t kChannelCapacity = 4096;  // also the most CQs on one channel
inline constexpr std::uint32_t kAsyncCapacity = 1024;

}  // namespace snic::shm
