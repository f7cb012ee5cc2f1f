// What the libFuzzer targets share: a reader that turns the fuzzer's bytes into choices
// (Input), registered memory that checks every byte an engine writes against what it was
// granted (GuardedMemory), work and completion queues that check each WR completes at most
// once and within its buffers (CheckedQueues), and the invariant check that aborts (require).
// The engines' unit tests use rc_harness.h's fakes; these are the same shapes, made strict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "proto/verbs/qp_memory.h"
#include "proto/verbs/wr.h"

namespace snic::fuzz {

// An invariant the target asserts: a violation aborts, which libFuzzer reports as a crash
// and keeps the input.
#define SNIC_FUZZ_REQUIRE(cond)                                                              \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, \
                         #cond);                                                             \
            std::abort();                                                                    \
        }                                                                                    \
    } while (0)

// The fuzzer's bytes as a stream of choices; reads past the end give zeros.
class Input {
  public:
    Input(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
    bool empty() const { return p_ == end_; }
    std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
    std::uint8_t u8() { return p_ == end_ ? 0 : *p_++; }
    std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | u8() << 8); }
    std::uint32_t u32() { return u16() | static_cast<std::uint32_t>(u16()) << 16; }
    std::uint64_t u64() { return u32() | static_cast<std::uint64_t>(u32()) << 32; }
    // Up to n bytes (fewer at the end of the input).
    std::span<const std::uint8_t> bytes(std::size_t n) {
        n = n < left() ? n : left();
        std::span<const std::uint8_t> s{p_, n};
        p_ += n;
        return s;
    }
    std::span<const std::uint8_t> rest() { return bytes(left()); }

  private:
    const std::uint8_t* p_;
    const std::uint8_t* end_;
};

// Registered memory whose every write is accounted for. Each region lives between guard
// bytes; before each engine call the target takes a snapshot (begin()), and after it
// (check()) every byte that changed must lie in a range the engine was granted for writing
// during the call (local(write) or remote(write/atomic) under a key that allows it), and the
// guards must be intact. A region without write rights therefore never changes, and an
// engine that writes past what it asked for aborts the run.
class GuardedMemory final : public verbs::QpMemory {
  public:
    static constexpr std::size_t kGuard = 64;
    static constexpr std::uint8_t kGuardByte = 0xA5;

    struct Region {
        std::uint32_t key = 0;
        std::uint32_t pd = 1;
        std::uint32_t access = 0;
        std::uint64_t va = 0;
        std::uint64_t len = 0;
        std::uint8_t* base = nullptr;  // host address of va (inside the store's guards)
        bool valid = true;
        bool remote_invalidate = true;
        bool window = false;
    };

    explicit GuardedMemory(std::uint32_t pd = 1) : pd_(pd) {}

    // Registers `len` bytes filled with `fill`; the key is returned.
    std::uint32_t add(std::uint32_t key, std::uint64_t va, std::uint64_t len, std::uint32_t access,
                      std::uint8_t fill = 0x5A, std::uint32_t pd = 0) {
        auto store = std::make_unique<std::vector<std::uint8_t>>(len + 2 * kGuard, kGuardByte);
        std::memset(store->data() + kGuard, fill, len);
        Region r;
        r.key = key;
        r.pd = pd == 0 ? pd_ : pd;
        r.access = access;
        r.va = va;
        r.len = len;
        r.base = store->data() + kGuard;
        stores_.push_back(std::move(store));
        regions_.push_back(r);
        return key;
    }

    Region* find(std::uint32_t key) {
        for (Region& r : regions_)
            if (r.key == key) return &r;
        return nullptr;
    }
    const std::deque<Region>& regions() const { return regions_; }

    // Before an engine call: what every byte is now; no grants yet.
    void begin() {
        grants_.clear();
        snap_.resize(stores_.size());
        for (std::size_t i = 0; i < stores_.size(); ++i) snap_[i] = *stores_[i];
    }
    // After it: every changed byte was granted for writing; the guards hold.
    void check() const {
        for (std::size_t i = 0; i < stores_.size(); ++i) {
            const std::vector<std::uint8_t>& now = *stores_[i];
            const std::vector<std::uint8_t>& was = snap_.at(i);
            if (std::memcmp(now.data(), was.data(), now.size()) == 0) continue;
            for (std::size_t b = 0; b < now.size(); ++b) {
                if (now[b] == was[b]) continue;
                const std::uint8_t* at = now.data() + b;
                SNIC_FUZZ_REQUIRE(b >= kGuard && b < now.size() - kGuard);  // a guard byte
                SNIC_FUZZ_REQUIRE(granted_write(at));
            }
        }
    }

    // verbs::QpMemory
    std::uint8_t* local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                        bool write) override {
        Region* r = find(lkey);
        if (r == nullptr || !r->valid || r->pd != pd_) return nullptr;
        if (write && (r->access & verbs::access::local_write) == 0) return nullptr;
        if (addr < r->va || addr + len < addr || addr + len > r->va + r->len) return nullptr;
        std::uint8_t* p = r->base + (addr - r->va);
        if (write) grants_.push_back({p, len});
        return p;
    }
    verbs::RemoteRegion remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                               verbs::RemoteNeed need) override {
        Region* r = find(rkey);
        if (r == nullptr || !r->valid) return {nullptr, verbs::RemoteCheck::bad_key};
        if (r->pd != pd_) return {nullptr, verbs::RemoteCheck::pd_mismatch};
        const std::uint32_t want = need == verbs::RemoteNeed::read ? verbs::access::remote_read
                                   : need == verbs::RemoteNeed::write
                                       ? verbs::access::remote_write
                                       : verbs::access::remote_atomic;
        if ((r->access & want) == 0) return {nullptr, verbs::RemoteCheck::no_access};
        if (addr < r->va || addr + len < addr || addr + len > r->va + r->len)
            return {nullptr, verbs::RemoteCheck::out_of_bounds};
        std::uint8_t* p = r->base + (addr - r->va);
        if (need != verbs::RemoteNeed::read) grants_.push_back({p, len});
        return {p, verbs::RemoteCheck::ok};
    }
    bool invalidate(std::uint32_t rkey) override {
        Region* r = find(rkey);
        if (r == nullptr || !r->valid || r->pd != pd_ || !r->remote_invalidate) return false;
        r->valid = false;
        return true;
    }
    verbs::WcStatus local_invalidate(std::uint32_t key) override {
        Region* r = find(key);
        if (r == nullptr || r->pd != pd_) return verbs::WcStatus::loc_prot_err;
        r->valid = false;
        return verbs::WcStatus::success;
    }
    verbs::WcStatus bind_mw(const verbs::MwBind& b) override {
        Region* mr = find(b.mr_lkey);
        if (mr == nullptr || !mr->valid || mr->pd != pd_ || mr->window)
            return verbs::WcStatus::mw_bind_err;
        if (b.addr < mr->va || b.addr + b.length < b.addr || b.addr + b.length > mr->va + mr->len)
            return verbs::WcStatus::mw_bind_err;
        if (b.new_rkey == mr->key) return verbs::WcStatus::mw_bind_err;
        Region* w = find(b.new_rkey);
        if (w == nullptr) {
            if (regions_.size() >= 64) return verbs::WcStatus::mw_bind_err;
            regions_.push_back(Region{});
            w = &regions_.back();
        } else if (!w->window) {
            return verbs::WcStatus::mw_bind_err;
        }
        w->key = b.new_rkey;
        w->pd = pd_;
        w->access = b.access & (verbs::access::remote_read | verbs::access::remote_write |
                                verbs::access::remote_atomic);
        w->va = b.addr;
        w->len = b.length;
        w->base = mr->base + (b.addr - mr->va);
        w->valid = true;
        w->window = true;
        return verbs::WcStatus::success;
    }

  private:
    struct Grant {
        const std::uint8_t* p;
        std::uint32_t len;
    };
    bool granted_write(const std::uint8_t* at) const {
        for (const Grant& g : grants_)
            if (at >= g.p && at < g.p + g.len) return true;
        return false;
    }

    std::uint32_t pd_;
    std::deque<Region> regions_;
    std::vector<std::unique_ptr<std::vector<std::uint8_t>>> stores_;
    std::vector<std::vector<std::uint8_t>> snap_;
    std::vector<Grant> grants_;
};

// Work and completion queues that hold the engine to the verbs rules a client relies on:
// every completion names a WR that was posted and not yet completed; a successful receive
// of a SEND never reports more bytes than the WR's buffers hold; on an RC QP (`in_order`) send WRs
// complete in the order they were posted (successful ones, or every one when signaled).
class CheckedQueues final : public verbs::QpQueues {
  public:
    explicit CheckedQueues(bool in_order) : in_order_(in_order) {}

    void post_send(const verbs::SendWr& wr) {
        sq.push_back(wr);
        send_out_[wr.wr_id] = true;
    }
    void post_recv(const verbs::RecvWr& wr) {
        rq.push_back(wr);
        std::uint64_t cap = 0;
        for (std::uint32_t i = 0; i < wr.num_sge && i < verbs::kMaxSge; ++i)
            cap += wr.sge[i].length;
        recv_out_[wr.wr_id] = cap;
    }

    bool send_ready() override { return !sq.empty(); }
    bool pop_send(verbs::SendWr& out) override {
        if (sq.empty()) return false;
        out = sq.front();
        sq.pop_front();
        taken_.push_back(out.wr_id);
        return true;
    }
    bool pop_recv(verbs::RecvWr& out) override {
        if (rq.empty()) return false;
        out = rq.front();
        rq.pop_front();
        return true;
    }
    void complete_send(const verbs::Completion& c) override {
        auto it = send_out_.find(c.wr_id);
        SNIC_FUZZ_REQUIRE(it != send_out_.end());  // posted, not completed before
        send_out_.erase(it);
        if (in_order_) {
            // Completions come in the order the WRs were taken; skipped ones were unsignaled.
            while (!taken_.empty() && taken_.front() != c.wr_id) taken_.pop_front();
            SNIC_FUZZ_REQUIRE(!taken_.empty());
            taken_.pop_front();
        }
        ++send_completions;
    }
    void complete_recv(const verbs::Completion& c) override {
        auto it = recv_out_.find(c.wr_id);
        SNIC_FUZZ_REQUIRE(it != recv_out_.end());
        // A SEND's bytes land in the WR's buffers; an RDMA WRITE with immediate only takes
        // the WR and reports the bytes it wrote elsewhere (ibv_wc.byte_len, as rxe does).
        if (c.status == verbs::WcStatus::success && c.opcode == verbs::WcOpcode::recv)
            SNIC_FUZZ_REQUIRE(c.byte_len <= it->second);
        recv_out_.erase(it);
        ++recv_completions;
    }

    std::deque<verbs::SendWr> sq;
    std::deque<verbs::RecvWr> rq;
    std::uint64_t send_completions = 0, recv_completions = 0;

  private:
    bool in_order_;
    std::map<std::uint64_t, bool> send_out_;
    std::map<std::uint64_t, std::uint64_t> recv_out_;
    std::deque<std::uint64_t> taken_;
};

}  // namespace snic::fuzz
