// Where an RC QP keeps the send WRs it holds (taken from its send queue, not yet completed):
// slots that come in chunks from a pool, so that a QP's memory follows what it has in flight
// rather than its max_send_wr. An idle QP holds no chunk; a QP takes a chunk when its next WR
// needs one and gives it back once none of the WRs it holds lives there. When the pool is
// empty the requester takes no more WRs (they wait in the client's ring) until chunks come
// back, as it does when the wire is full.
//
// One pool serves the QPs of one thread (an lcore); it reserves all its chunks when built and
// allocates nothing afterwards. A chunk is first written when first taken, so that the pages of
// chunks never used are never touched (they cost no resident memory).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "proto/roce/rc.h"

namespace snic::roce {

enum class SlotState : std::uint8_t { staged, in_flight, done, failed };

// One send WR as the requester and the completer track it.
struct SendSlot {
    SendWr wr;
    const WrOpInfo* op = nullptr;
    std::uint32_t length = 0;     // message bytes
    std::uint32_t first_psn = 0;  // first PSN (READ: of its first response)
    std::uint32_t npsn = 0;       // PSNs it takes (READ: responses); 0 for local operations
    std::uint32_t acked = 0;      // PSNs acknowledged, or READ responses placed
    SlotState state = SlotState::staged;
    WcStatus status = WcStatus::success;
    RcError why = RcError::none;  // failed: the QP error it causes
    // Kept 0 and false between WRs (a slot leaves the QP only after both are reset), so that
    // taking a WR needs no store for them.
    TxHold tx_hold = 0;    // what the wire still sends from its memory (RcWire)
    bool decided = false;  // its completion fixed by comp_fail_at; made by the flush
};

// Slots per chunk, and the most WRs one QP holds at once (in flight, done but not yet
// retired, at most one staged). Twice the default window of 128 PSNs: a window of one-packet
// messages fits, with room for the ones that take none.
inline constexpr std::uint32_t kSlotChunk = 32;
inline constexpr std::uint32_t kMaxHeldWrs = 256;
inline constexpr std::uint32_t kMaxChunksPerQp = kMaxHeldWrs / kSlotChunk;

struct SlotChunk {
    std::array<SendSlot, kSlotChunk> slots;
    SlotChunk* next_free = nullptr;
};
static_assert(std::is_trivially_destructible_v<SlotChunk>);

// A fixed set of chunks and the free list between them (LIFO: the chunk given back last, still
// in cache, goes out first); chunks never taken yet lie beyond `fresh_`.
class SendSlotPool {
  public:
    explicit SendSlotPool(std::uint32_t chunks)
        : store_(static_cast<SlotChunk*>(
              ::operator new (sizeof(SlotChunk) * chunks, std::align_val_t{alignof(SlotChunk)}))),
          capacity_(chunks),
          free_count_(chunks) {}
    ~SendSlotPool() { ::operator delete (store_, std::align_val_t{alignof(SlotChunk)}); }
    SendSlotPool(const SendSlotPool&) = delete;
    SendSlotPool& operator=(const SendSlotPool&) = delete;

    // A free chunk, or nullptr when every chunk is out.
    SlotChunk* take() {
        SlotChunk* c = free_;
        if (c != nullptr) {
            free_ = c->next_free;
        } else if (fresh_ < capacity_) {
            c = ::new (store_ + fresh_++) SlotChunk;
        } else {
            return nullptr;
        }
        --free_count_;
        return c;
    }
    void give(SlotChunk* c) {
        c->next_free = free_;
        free_ = c;
        ++free_count_;
    }

    std::uint32_t capacity() const { return capacity_; }
    std::uint32_t free_chunks() const { return free_count_; }
    // Chunks ever taken: the pool's resident memory is about this many chunks.
    std::uint32_t touched() const { return fresh_; }
    static constexpr std::size_t chunk_bytes() { return sizeof(SlotChunk); }

  private:
    SlotChunk* const store_;  // uninitialized beyond fresh_
    const std::uint32_t capacity_;
    std::uint32_t fresh_ = 0;
    SlotChunk* free_ = nullptr;
    std::uint32_t free_count_;
};

}  // namespace snic::roce
