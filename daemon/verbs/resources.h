// What snicd shares between all client sessions: the one key space of MR and MW keys, the
// QP and SRQ numbers, the object counts against the per-client and per-daemon limits, the
// client descriptors kept per user, and the list of sessions. Also the per-session handle
// table every session keeps per kind.
//
// All of it is owned and changed by the control thread. The name tables are preallocated
// arrays of slots that never move, so that a data lcore can resolve a key or a QP number
// with one acquire load of the slot's name and nothing else: a slot's object pointer and
// kind are written before its name is published (release), and a name is withdrawn before
// its object goes.
//
// Names go on the wire (QP numbers in every BTH, rkeys in RETHs), so they are not
// predictable: each table is seeded at start-up (from getrandom(2) in the daemon), hands its
// slots out first in a shuffled order, starts each slot at a random generation and puts
// random tag bits in every name, so that a blind forger has to guess the QP number, the key
// and the PSN together.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/result.h"
#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/limits.h"
#include "shm/control_abi.h"

namespace snic::daemon {

class Session;

using Counts = std::array<std::uint32_t, shm::kObjKinds>;

// How a table packs a name: a slot field at index_shift and a generation of gen_bits at
// gen_shift. The slot field holds the slot's index in its low bits (as many as the table's
// slot count needs) and a random tag, drawn anew for every name, in the rest. Generations
// run 1..2^gen_bits - 1 and never 0, so that no name is 0 (nor 1: QP numbers 0 and 1 are
// the IBA's SMI and GSI); nor is any name all ones (QP number 0xffffff is the IBA's
// multicast QP).
struct NameFormat {
    unsigned index_shift;
    unsigned gen_shift;
    unsigned gen_bits;
};
// MR and MW keys: (slot field << 8) | generation byte; the slot field is key >> 8, the byte
// is the consumer's key byte that ibv_inc_rkey renames.
inline constexpr NameFormat kKeyFormat{8, 0, 8};
// QP numbers, 24 bits: (generation << 14) | slot field, so that a QP number's low 14 bits
// tell live QPs apart (the transport finds a QP by them).
inline constexpr NameFormat kQpnFormat{0, 14, 10};
// SRQ numbers, 24 bits: (generation << 12) | slot field.
inline constexpr NameFormat kSrqnFormat{0, 12, 12};

// 64 bits from getrandom(2), for seeding the name tables at start-up. Throws
// std::system_error when the kernel gives none (before Linux 3.17).
std::uint64_t random_seed();

// A daemon-wide name space: a fixed array of slots, each naming one object at a time.
// Freed slots are reused oldest first (at first in an order shuffled by the seed), and each
// reuse moves the slot's generation on, so a name comes back only after every other slot
// was reused and the slot's generations went round. A slot's first generation and each
// name's tag come from the seed.
class NameTable {
  public:
    // The object kinds a key names (Slot::kind).
    static constexpr std::uint8_t kMr = 1;
    static constexpr std::uint8_t kMw = 2;

    NameTable(std::uint32_t slots, NameFormat format, std::uint64_t seed);
    NameTable(const NameTable&) = delete;
    NameTable& operator=(const NameTable&) = delete;

    // A fresh name for `obj`, or 0 when every slot is taken.
    std::uint32_t acquire(const void* obj, std::uint8_t kind = 0);
    // Withdraws a live name (from then on lookup() misses it).
    void release(std::uint32_t name);

    // The object `name` stands for now, or nullptr: stale generation, free slot, index out
    // of range, or another kind. Safe from any thread (acquire load).
    // Inline: every key a datapath packet uses goes through it.
    inline const void* lookup(std::uint32_t name, std::uint8_t kind = 0) const;
    // The object of kind `kind` in the slot `name` points at, whatever the name's
    // generation: for memory windows, whose key byte each bind renames (the window then
    // checks the whole key itself). Safe from any thread (acquire load).
    const void* lookup_slot(std::uint32_t name, std::uint8_t kind) const;

    // The index of the slot `name` points at: O(1), whether or not the name is live (it may
    // be capacity() or more for a name that is no table's).
    std::uint32_t index_of(std::uint32_t name) const {
        return (name >> format_.index_shift) & index_mask_;
    }

    std::uint32_t capacity() const { return nslots_; }
    std::uint32_t live() const { return live_; }

  private:
    struct Slot {
        std::atomic<std::uint32_t> name{0};  // the live name, 0 when free
        std::atomic<const void*> obj{nullptr};
        std::atomic<std::uint8_t> kind{0};
        std::uint32_t gen = 0;  // last generation handed out (control thread only)
    };

    // The slot `name` points at, or nullptr when the name has bits outside its format.
    const Slot* slot_of(std::uint32_t name) const {
        const std::uint32_t index = index_of(name);
        if (index >= nslots_ || (name & ~name_mask_) != 0) return nullptr;
        return &slots_[index];
    }
    std::uint32_t make(std::uint32_t index, std::uint32_t tag, std::uint32_t gen) const;
    std::uint64_t next_random();

    const std::uint32_t nslots_;
    const NameFormat format_;
    const unsigned index_bits_;       // low bits of the slot field holding the index
    const std::uint32_t index_mask_;  // (1 << index_bits_) - 1
    const std::uint32_t tag_mask_;    // the slot field's bits above the index, in the field
    const std::uint32_t gen_mask_;    // 2^gen_bits - 1, unshifted
    const std::uint32_t name_mask_;   // every bit a name of this table may have
    std::uint64_t random_;            // splitmix64 state (control thread only)
    std::unique_ptr<Slot[]> slots_;
    std::vector<std::uint32_t> free_;  // FIFO of free slot indices, a ring of nslots_
    std::uint32_t free_head_ = 0;
    std::uint32_t free_count_ = 0;
    std::uint32_t live_ = 0;
};

const void* NameTable::lookup(std::uint32_t name, std::uint8_t kind) const {
    const Slot* s = name == 0 ? nullptr : slot_of(name);
    if (s == nullptr || s->name.load(std::memory_order_acquire) != name) return nullptr;
    if (s->kind.load(std::memory_order_relaxed) != kind) return nullptr;
    return s->obj.load(std::memory_order_relaxed);
}

// A name held by an object; released when the object goes.
class NameLease {
  public:
    NameLease() = default;
    NameLease(NameTable& table, std::uint32_t name) : table_(&table), name_(name) {}
    NameLease(NameLease&& o) noexcept
        : table_(std::exchange(o.table_, nullptr)), name_(std::exchange(o.name_, 0)) {}
    NameLease& operator=(NameLease&& o) noexcept;
    ~NameLease();
    std::uint32_t get() const { return name_; }
    explicit operator bool() const { return name_ != 0; }

  private:
    NameTable* table_ = nullptr;
    std::uint32_t name_ = 0;
};

class Resources;

// A client's descriptor snicd keeps (a notification socket), counted daemon-wide (ClientFd),
// in its client's count and in its user's while it is kept. Made by Resources::keep_fd.
class KeptFd {
  public:
    KeptFd() = default;
    KeptFd(KeptFd&& o) noexcept
        : fd_(std::move(o.fd_)),
          r_(std::exchange(o.r_, nullptr)),
          uid_(o.uid_),
          client_(std::exchange(o.client_, nullptr)) {}
    KeptFd& operator=(KeptFd&& o) noexcept;
    ~KeptFd() { release(); }
    int get() const { return fd_.get(); }

  private:
    friend class Resources;
    KeptFd(ClientFd fd, Resources& r, std::uint32_t uid, std::uint32_t& client)
        : fd_(std::move(fd)), r_(&r), uid_(uid), client_(&client) {}
    void release();

    ClientFd fd_;
    Resources* r_ = nullptr;
    std::uint32_t uid_ = 0;
    std::uint32_t* client_ = nullptr;
};

// The daemon-wide state shared by the sessions.
class Resources {
  public:
    // Each name table is seeded from `seed`.
    explicit Resources(const Limits& limits = kLimits, std::uint64_t seed = random_seed());
    Resources(const Resources&) = delete;
    Resources& operator=(const Resources&) = delete;

    const Limits& limits() const { return limits_; }

    // One object of kind `k` for the session counting in `session`, a client of user `uid`:
    // counted in both and in the user's, or false (ENOMEM) when the per-client or the
    // per-daemon limit is reached, or, for a user other than root, its share (per_uid) or the
    // daemon's limit less root's reserve.
    bool reserve(shm::ObjKind k, Counts& session, std::uint32_t uid);
    void release(shm::ObjKind k, Counts& session, std::uint32_t uid);
    std::uint32_t count_of_uid(shm::ObjKind k, std::uint32_t uid) const;
    std::uint32_t count(shm::ObjKind k) const { return counts_[static_cast<std::size_t>(k)]; }
    const Counts& counts() const { return counts_; }

    // Keeps `fd` for a client of user `uid` that keeps `client` descriptors now: counted in
    // both, or EMFILE (and `fd` closed) when the client's bound or the user's
    // (max_fds_per_client, max_fds_per_uid) is reached; the message gives the figures.
    // Checked before anything else is done with the descriptor: an op calls it first.
    Result<KeptFd> keep_fd(Fd fd, std::uint32_t uid, std::uint32_t& client);
    // The client descriptors kept for user `uid`'s clients (sessions and rdma_cm connections).
    std::uint32_t fds_of_uid(std::uint32_t uid) const;

    NameTable& keys() { return keys_; }
    NameTable& qpns() { return qpns_; }
    NameTable& srqns() { return srqns_; }

    // The sessions, oldest first; a session adds itself when made and removes itself when
    // destroyed.
    std::uint32_t add_session(Session* s);  // returns the session's daemon-wide number
    void remove_session(Session* s);
    const std::vector<Session*>& sessions() const { return sessions_; }

    // Returns once no data lcore can still use a pointer to client memory it obtained
    // through the key table before the call (set by the daemon; nothing to wait for in
    // unit tests). Between withdrawing a key and unmapping its memory.
    void set_quiesce(std::function<void()> fn) { quiesce_ = std::move(fn); }
    void quiesce() const {
        if (quiesce_) quiesce_();
    }

  private:
    friend class KeptFd;
    void release_fd(std::uint32_t uid, std::uint32_t& client);

    std::function<void()> quiesce_;
    const Limits limits_;
    Counts counts_{};
    std::map<std::uint32_t, std::uint32_t> fds_by_uid_;  // users keeping none are left out
    std::map<std::uint32_t, Counts> counts_by_uid_;      // users holding none are left out
    NameTable keys_;
    NameTable qpns_;
    NameTable srqns_;
    std::vector<Session*> sessions_;
    std::uint32_t next_session_ = 1;
};

// One counted object: released from the counts when destroyed.
class Counted {
  public:
    Counted() = default;
    Counted(Resources& r, shm::ObjKind k, Counts& session, std::uint32_t uid)
        : r_(&r), k_(k), session_(&session), uid_(uid) {}
    Counted(Counted&& o) noexcept
        : r_(std::exchange(o.r_, nullptr)), k_(o.k_), session_(o.session_), uid_(o.uid_) {}
    Counted& operator=(Counted&& o) noexcept {
        if (this != &o) {
            if (r_ != nullptr) r_->release(k_, *session_, uid_);
            r_ = std::exchange(o.r_, nullptr);
            k_ = o.k_;
            session_ = o.session_;
            uid_ = o.uid_;
        }
        return *this;
    }
    ~Counted() {
        if (r_ != nullptr) r_->release(k_, *session_, uid_);
    }

  private:
    Resources* r_ = nullptr;
    shm::ObjKind k_ = shm::ObjKind::pd;
    Counts* session_ = nullptr;
    std::uint32_t uid_ = 0;
};

// One session's objects of one kind, named by handles (generation << 16) | index. Each
// object is allocated on its own and never moves; a handle is valid only while its object
// lives, and a reused slot gets a new generation, so stale handles miss.
template <class T>
class HandleTable {
  public:
    static constexpr std::uint32_t kMaxSlots = 0xffff;  // index 0xffff never used

    // Stores `obj`, sets its `handle` member and returns the handle; shm::kNoHandle (and
    // `obj` destroyed) if the table is full.
    shm::Handle insert(std::unique_ptr<T> obj) {
        std::uint32_t index;
        if (!free_.empty()) {
            index = free_.back();
            free_.pop_back();
        } else if (slots_.size() < kMaxSlots) {
            index = static_cast<std::uint32_t>(slots_.size());
            slots_.emplace_back();
        } else {
            return shm::kNoHandle;
        }
        Slot& s = slots_[index];
        s.gen = static_cast<std::uint16_t>(s.gen == 0xffff ? 1 : s.gen + 1);
        const shm::Handle h = (std::uint32_t{s.gen} << 16) | index;
        obj->handle = h;
        s.obj = std::move(obj);
        ++size_;
        return h;
    }

    // The object named by `h`, or nullptr for a stale, foreign or malformed handle.
    T* find(shm::Handle h) const {
        const std::uint32_t index = h & 0xffff;
        if (index >= slots_.size()) return nullptr;
        const Slot& s = slots_[index];
        if (!s.obj || s.gen != (h >> 16)) return nullptr;
        return s.obj.get();
    }

    // Removes and returns the object named by `h` (nullptr if none).
    std::unique_ptr<T> take(shm::Handle h) {
        if (find(h) == nullptr) return nullptr;
        const std::uint32_t index = h & 0xffff;
        free_.push_back(index);
        --size_;
        return std::move(slots_[index].obj);
    }

    // Destroys every object, most recent slot first.
    void clear() {
        for (std::size_t i = slots_.size(); i-- > 0;) slots_[i].obj.reset();
        size_ = 0;
        free_.clear();
        for (std::size_t i = slots_.size(); i-- > 0;)
            free_.push_back(static_cast<std::uint32_t>(i));
    }

    std::size_t size() const { return size_; }

    // Destroys up to `n` objects, most recent slot first, after `before` has seen them all
    // (a std::span<T* const>). Returns how many it destroyed.
    template <class F>
    std::size_t drop(std::size_t n, F&& before) {
        std::vector<T*> picked;
        for (std::size_t i = slots_.size(); i-- > 0 && picked.size() < n;)
            if (slots_[i].obj) picked.push_back(slots_[i].obj.get());
        before(std::span<T* const>(picked));
        for (T* obj : picked) take(obj->handle).reset();
        return picked.size();
    }
    std::size_t drop(std::size_t n) {
        return drop(n, [](std::span<T* const>) {});
    }

    template <class F>
    void for_each(F&& f) const {
        for (const Slot& s : slots_)
            if (s.obj) f(std::as_const(*s.obj));
    }
    template <class F>
    void for_each(F&& f) {
        for (Slot& s : slots_)
            if (s.obj) f(*s.obj);
    }

  private:
    struct Slot {
        std::uint16_t gen = 0;
        std::unique_ptr<T> obj;
    };
    std::vector<Slot> slots_;
    std::vector<std::uint32_t> free_;
    std::size_t size_ = 0;
};

}  // namespace snic::daemon
