// Payloads sent from where they lie (placed_tx.h). attach/settled/forget run on the port's
// lcore; freed() on whichever lcore frees the mbuf; the quiesce pair on the control thread.
#include "daemon/port/placed_tx.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <thread>

namespace snic::daemon {

namespace {

// Quiesce epochs: an attached mbuf counts in the parity of the epoch it was attached in.
std::atomic<std::uint32_t> g_epoch{0};
std::atomic<std::int64_t> g_in_flight[2];
std::mutex g_quiesce;  // one quiesce at a time: a parity is drained before it comes round

}  // namespace

PlacedTx::PlacedTx(std::uint32_t records, std::uint32_t tallies)
    : records_(std::make_unique<Record[]>(records)),
      tallies_(std::make_unique<Tally[]>(tallies)),
      nrecords_(records),
      ntallies_(tallies) {}

PlacedTx::~PlacedTx() {
    if (in_flight() == 0) return;
    // Mbufs still out (a port stopped with frames in a ring it will not drain): their frees
    // would write here, so the records stay.
    spdlog::warn("{} placed mbuf(s) not freed at shutdown: their records are kept", in_flight());
    (void)records_.release();
    (void)tallies_.release();
}

std::uint64_t PlacedTx::in_flight() const {
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < nrecords_; ++i)
        n += records_[i].busy.load(std::memory_order_acquire) ? 1 : 0;
    return n;
}

PlacedTx::Tally* PlacedTx::take_tally() {
    // A few candidates from the cursor: free, or forgotten with nothing left in flight.
    for (std::uint32_t tries = 0; tries < 8; ++tries) {
        Tally& t = tallies_[next_tally_];
        next_tally_ = next_tally_ + 1 == ntallies_ ? 0 : next_tally_ + 1;
        if (t.owned && !(t.forgotten && t.in_flight.load(std::memory_order_acquire) == 0)) continue;
        t.owned = true;
        t.forgotten = false;
        return &t;
    }
    return nullptr;
}

bool PlacedTx::attach(rte_mbuf* m, const std::uint8_t* data, std::uint16_t len,
                      roce::TxHold* hold) {
    Record& r = records_[next_record_];
    if (r.busy.load(std::memory_order_acquire)) return false;  // still out: copy instead
    Tally* t = nullptr;
    if (hold != nullptr) {
        if (*hold == 0) {
            t = take_tally();
            if (t == nullptr) return false;
            *hold = static_cast<roce::TxHold>(t - tallies_.get()) + 1;
        } else {
            t = &tallies_[*hold - 1];
        }
        t->in_flight.fetch_add(1, std::memory_order_relaxed);
    }
    next_record_ = next_record_ + 1 == nrecords_ ? 0 : next_record_ + 1;
    r.tally = t;
    r.epoch = g_epoch.load(std::memory_order_acquire) & 1u;
    g_in_flight[r.epoch].fetch_add(1, std::memory_order_relaxed);
    r.busy.store(true, std::memory_order_relaxed);
    r.shinfo.free_cb = &PlacedTx::freed;
    r.shinfo.fcb_opaque = &r;
    rte_mbuf_ext_refcnt_set(&r.shinfo, 1);
    // The memory is the client's, outside DPDK's: no IOVA. Placement is for ports that do
    // not DMA (Port::placement).
    rte_pktmbuf_attach_extbuf(m, const_cast<std::uint8_t*>(data), RTE_BAD_IOVA, len, &r.shinfo);
    m->data_len = len;
    m->pkt_len = len;
    return true;
}

void PlacedTx::freed(void*, void* opaque) {
    auto& r = *static_cast<Record*>(opaque);
    if (r.tally != nullptr) r.tally->in_flight.fetch_sub(1, std::memory_order_release);
    g_in_flight[r.epoch].fetch_sub(1, std::memory_order_release);
    r.busy.store(false, std::memory_order_release);
}

bool PlacedTx::settled(roce::TxHold& hold) {
    Tally& t = tallies_[hold - 1];
    if (t.in_flight.load(std::memory_order_acquire) != 0) return false;
    t.owned = false;
    hold = 0;
    return true;
}

void PlacedTx::forget(roce::TxHold& hold) {
    Tally& t = tallies_[hold - 1];
    if (t.in_flight.load(std::memory_order_acquire) == 0)
        t.owned = false;
    else
        t.forgotten = true;  // taken again once its last mbuf is freed
    hold = 0;
}

std::uint32_t placed_quiesce_begin() {
    g_quiesce.lock();
    return g_epoch.fetch_add(1, std::memory_order_acq_rel) & 1u;
}

void placed_quiesce_wait(std::uint32_t epoch) {
    using namespace std::chrono;
    const auto start = steady_clock::now();
    auto warned = start;
    while (g_in_flight[epoch].load(std::memory_order_acquire) != 0) {
        std::this_thread::sleep_for(microseconds(20));
        if (steady_clock::now() - warned >= seconds(1)) {
            warned = steady_clock::now();
            spdlog::warn("quiesce: {} placed mbuf(s) still held by a port after {} ms",
                         g_in_flight[epoch].load(std::memory_order_relaxed),
                         duration_cast<milliseconds>(warned - start).count());
        }
    }
    g_quiesce.unlock();
}

}  // namespace snic::daemon
