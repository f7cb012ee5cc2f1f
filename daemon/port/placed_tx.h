// Payloads sent from where they lie: a frame's payload in a client's registered memory goes to
// the port as an mbuf attached to that memory (a DPDK external buffer) instead of being copied
// into the frame. The port (its PMD, or the port it hands the mbuf to) reads the memory until
// it frees the mbuf, so two things wait for that free:
//
// - the WR the payload belongs to: its completion gives the buffer back to the client, and so
//   waits until no mbuf of it is left (a tally per WR, roce::TxHold, asked by the engine);
// - the memory itself: a region is unmapped only after Resources::quiesce(), which waits, by
//   epoch, until every mbuf attached before it is freed (placed_quiesce_begin/_wait).
//
// Each attached mbuf takes a record (its rte_mbuf_ext_shared_info and what its free must
// count down) from a fixed ring per port; a record is busy until its mbuf is freed, on
// whatever lcore frees it, and a busy record or tally at the ring's cursor means no
// placement for that payload: the caller copies it instead. No allocation after the
// constructor; the counts are atomics, as a free may happen on another lcore (a virtual wire
// hands the mbuf itself to the receiving port).
#pragma once

#include <rte_mbuf.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "proto/roce/rc.h"

namespace snic::daemon {

class PlacedTx {
  public:
    // `records`: mbufs attached at once, at most; `tallies`: WRs with mbufs in flight.
    PlacedTx(std::uint32_t records, std::uint32_t tallies);
    ~PlacedTx();
    PlacedTx(const PlacedTx&) = delete;
    PlacedTx& operator=(const PlacedTx&) = delete;

    // Attaches `m` (fresh from a pool) to [data, data + len) and counts it in `hold`'s tally
    // (taking a tally when *hold is 0; nullptr: no WR waits for it). False, with `m` left
    // as it was, when no record or tally is free.
    bool attach(rte_mbuf* m, const std::uint8_t* data, std::uint16_t len, roce::TxHold* hold);

    // Whether no mbuf counted in `hold` is left; then the tally is free again and hold 0.
    bool settled(roce::TxHold& hold);
    // The WR goes without waiting (its QP is destroyed): the tally is freed once its last
    // mbuf is. hold becomes 0.
    void forget(roce::TxHold& hold);

    // Mbufs attached and not yet freed.
    std::uint64_t in_flight() const;

  private:
    struct Tally {
        std::atomic<std::uint32_t> in_flight{0};
        bool owned = false;  // a WR's, or forgotten while mbufs were left (lcore only)
        bool forgotten = false;
    };
    struct Record {
        rte_mbuf_ext_shared_info shinfo;
        Tally* tally = nullptr;
        std::uint32_t epoch = 0;  // the quiesce epoch's parity it counts in
        std::atomic<bool> busy{false};
    };
    static void freed(void* addr, void* opaque);
    Tally* take_tally();

    std::unique_ptr<Record[]> records_;
    std::unique_ptr<Tally[]> tallies_;
    std::uint32_t nrecords_, ntallies_;
    std::uint32_t next_record_ = 0, next_tally_ = 0;
};

// Resources::quiesce()'s part (daemon/main.cc): begin before the lcores' round trip, wait
// after it; returns once every mbuf attached before the round trip has been freed.
std::uint32_t placed_quiesce_begin();
void placed_quiesce_wait(std::uint32_t epoch);

}  // namespace snic::daemon
