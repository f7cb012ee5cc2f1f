// Single-producer/single-consumer ring in memory shared by two processes.
//
// The ring is the unit of the daemon<->client data path: SQ, RQ, SRQ and CQ rings are all
// instances of it, each living in a memfd that both snicd and the client map. One process
// produces, the other consumes, and each side treats the other as untrusted: a corrupted header
// or index is reported, never turned into an out-of-bounds access.
//
// Layout of one ring in the mapping (all offsets from the start of the span, which is 64-byte
// aligned):
//
//     0    RingHeader line 0: magic, version, capacity, mask, entry size, byte size (read-only)
//     64   RingHeader line 1: producer index (written by the producer only)
//     128  RingHeader line 2: consumer index (written by the consumer only)
//     192  RingHeader line 3: reserved guard line
//     256  capacity slots of entry_size bytes each
//
// The guard line keeps the consumer index and the first slots out of the same 128-byte pair of
// lines that the adjacent-line prefetchers of current x86 cores fetch together.
//
// Indices are free-running 32-bit counters: slot = index & mask, used = prod - cons (mod 2^32),
// so capacity is a power of two no larger than 2^31. The producer publishes entries with a release
// store of its index; the consumer acquires it before reading slots, and releases its own index
// after it has copied the entries out, which the producer acquires before reusing those slots.
//
// Entries that carry their own publication word (a `std::uint32_t seq` member: SendWqe, RecvWqe,
// Cqe) are sequenced: the producer writes the entry, then stores `index + 1` into its seq with
// release, and the consumer takes the slot at its index when (and only when) the slot's seq
// holds exactly that tag, with acquire. So a consumer never reads the producer's index line:
// polling an empty ring reads the next slot, which stays in the consumer's cache until the
// producer writes it, and each hand-over moves the entry's own lines and nothing else, as an
// RNIC's owner bit does in its CQEs. Format stamps every slot's seq with the tag of the lap
// before, so that nothing left in the memory reads as an entry. A sequenced entry may also name
// how much of it is in use (`used_bytes()`, read from its first kRingCacheLine bytes): only
// that much is copied in and out, so a send WQE with one SGE moves one line, not the whole slot.
// The producer index is still stored (once per burst or publish()) for size() and
// diagnostics; nothing on the fast path reads it.
//
// Each view keeps its own index and the geometry privately and never reads them back from shared
// memory after attaching; only the peer's index (or a slot's seq) is loaded, and it is checked
// on every load.
// Hot-path calls allocate nothing, make no syscalls, take no locks and throw nothing.
#pragma once

#include <atomic>
#include <cassert>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <type_traits>

namespace snic::shm {

// Identifies a formatted ring header ("SNRG" read as a little-endian word).
inline constexpr std::uint32_t kRingMagic = 0x47524e53u;
// Layout version of RingHeader and the slot area; bump on any incompatible change.
// 2: sequenced entries (a seq word in the slot publishes it).
inline constexpr std::uint32_t kRingVersion = 2;
// Cache line size the layout is built around.
inline constexpr std::size_t kRingCacheLine = 64;
// Largest capacity the free-running 32-bit indices can tell apart from empty.
inline constexpr std::uint32_t kRingMaxCapacity = std::uint32_t{1} << 31;

// An entry type whose slots carry their own publication word (see the top of this file).
template <class T>
concept SequencedEntry = std::is_same_v<decltype(T::seq), std::uint32_t>;

// A sequenced entry that says how many of its bytes are in use, from its first line.
template <class T>
concept SizedEntry = SequencedEntry<T> && requires(const T& t) {
    { t.used_bytes() }
    noexcept->std::same_as<std::size_t>;
};

// The ring header at the start of the shared mapping. Plain fixed-width words, so its layout is
// the same in every process and compiler; the indices are accessed through std::atomic_ref.
struct alignas(kRingCacheLine) RingHeader {
    // Line 0: geometry, written once by init and validated by attach.
    std::uint32_t magic;       // kRingMagic once the header is complete
    std::uint32_t version;     // kRingVersion
    std::uint32_t capacity;    // number of slots, a power of two
    std::uint32_t mask;        // capacity - 1
    std::uint32_t entry_size;  // bytes per slot (sizeof the entry type)
    std::uint32_t reserved0;
    std::uint64_t bytes;  // header plus slots: the span size the ring needs
    std::uint8_t reserved1[32];

    // Line 1: producer index, the count of entries ever produced (mod 2^32).
    std::uint32_t prod;
    std::uint8_t pad_prod[60];

    // Line 2: consumer index, the count of entries ever consumed (mod 2^32).
    std::uint32_t cons;
    std::uint8_t pad_cons[60];

    // Line 3: guard, keeps slots off the consumer index's line pair.
    std::uint8_t guard[64];
};

static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(std::is_trivially_copyable_v<RingHeader>);
static_assert(sizeof(RingHeader) == 256);
static_assert(alignof(RingHeader) == kRingCacheLine);
static_assert(offsetof(RingHeader, magic) == 0);
static_assert(offsetof(RingHeader, version) == 4);
static_assert(offsetof(RingHeader, capacity) == 8);
static_assert(offsetof(RingHeader, mask) == 12);
static_assert(offsetof(RingHeader, entry_size) == 16);
static_assert(offsetof(RingHeader, bytes) == 24);
static_assert(offsetof(RingHeader, prod) == 64);
static_assert(offsetof(RingHeader, cons) == 128);
static_assert(offsetof(RingHeader, guard) == 192);
// The shared words must be lock-free (hence address-free) to work between processes.
static_assert(std::atomic_ref<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<std::uint32_t>::required_alignment <= alignof(std::uint32_t));
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<std::uint64_t>::required_alignment <= alignof(std::uint64_t));

// Why init or attach refused a span. Values are stable; 0 is success.
enum class RingError : int {
    ok = 0,
    misaligned,       // span does not start on a 64-byte boundary
    too_small,        // span cannot hold the header plus the slots
    bad_capacity,     // capacity zero, not a power of two, above 2^31, or mask != capacity - 1
    bad_magic,        // no ring was formatted here
    bad_version,      // ring formatted by an incompatible layout version
    bad_entry_size,   // entry size in the header differs from sizeof(T)
    bad_size,         // the header's byte size disagrees with its capacity and entry size
    corrupt_indices,  // prod - cons exceeds capacity
};

// Human-readable text for a RingError, for logs and the C ABI's *_strerror.
constexpr const char* ring_strerror(RingError e) noexcept {
    switch (e) {
        case RingError::ok:
            return "success";
        case RingError::misaligned:
            return "ring memory is not 64-byte aligned";
        case RingError::too_small:
            return "ring memory is smaller than the ring";
        case RingError::bad_capacity:
            return "ring capacity is not a power of two in [1, 2^31]";
        case RingError::bad_magic:
            return "no ring header (bad magic)";
        case RingError::bad_version:
            return "unsupported ring layout version";
        case RingError::bad_entry_size:
            return "ring entry size mismatch";
        case RingError::bad_size:
            return "ring header byte size is inconsistent";
        case RingError::corrupt_indices:
            return "ring indices are further apart than capacity";
    }
    return "unknown ring error";
}

// Bytes a ring of `capacity` entries of `entry_size` bytes occupies (header plus slots).
constexpr std::uint64_t ring_bytes(std::uint32_t capacity, std::uint32_t entry_size) noexcept {
    return sizeof(RingHeader) + std::uint64_t{capacity} * entry_size;
}

// Bytes a ring of `capacity` entries of type T occupies; size the memfd with this.
template <class T>
constexpr std::uint64_t ring_bytes(std::uint32_t capacity) noexcept {
    return ring_bytes(capacity, sizeof(T));
}

// A view or the reason there is none (a minimal std::expected until C++23).
template <class V>
class [[nodiscard]] RingResult {
  public:
    RingResult(const V& v) noexcept : value_(v) {}
    RingResult(RingError e) noexcept : error_(e) { assert(e != RingError::ok); }

    bool has_value() const noexcept { return value_.has_value(); }
    explicit operator bool() const noexcept { return has_value(); }
    RingError error() const noexcept { return error_; }

    // Precondition: has_value().
    V& value() noexcept {
        assert(has_value());
        return *value_;
    }
    V& operator*() noexcept { return value(); }
    V* operator->() noexcept { return &value(); }

  private:
    std::optional<V> value_;
    RingError error_ = RingError::ok;
};

namespace detail {

constexpr bool ring_capacity_ok(std::uint32_t capacity) noexcept {
    return capacity != 0 && capacity <= kRingMaxCapacity && (capacity & (capacity - 1)) == 0;
}

inline std::uint32_t load_relaxed(std::uint32_t& w) noexcept {
    return std::atomic_ref<std::uint32_t>(w).load(std::memory_order_relaxed);
}
inline std::uint32_t load_acquire(std::uint32_t& w) noexcept {
    return std::atomic_ref<std::uint32_t>(w).load(std::memory_order_acquire);
}
inline void store_relaxed(std::uint32_t& w, std::uint32_t v) noexcept {
    std::atomic_ref<std::uint32_t>(w).store(v, std::memory_order_relaxed);
}
inline void store_release(std::uint32_t& w, std::uint32_t v) noexcept {
    std::atomic_ref<std::uint32_t>(w).store(v, std::memory_order_release);
}

// Where a validated ring lives and its geometry, as copied out of the header once.
struct RingMapping {
    RingHeader* hdr;
    std::byte* slots;
    std::uint32_t capacity;
    std::uint32_t mask;
    std::uint32_t prod;  // indices as found at init/attach time
    std::uint32_t cons;
};

inline RingError check_span(std::span<std::byte> mem) noexcept {
    if (reinterpret_cast<std::uintptr_t>(mem.data()) % kRingCacheLine != 0)
        return RingError::misaligned;
    if (mem.size() < sizeof(RingHeader)) return RingError::too_small;
    return RingError::ok;
}

// The seq that publishes the entry at `index`: the one rule both sides apply.
constexpr std::uint32_t seq_tag(std::uint32_t index) noexcept {
    return index + 1;
}

// No seq word in the entries (ring_format's seq_offset).
inline constexpr std::size_t kNoSeq = ~std::size_t{0};

// Formats a fresh ring in `mem` with both indices at `start`. With entries that carry a seq
// word at `seq_offset`, every slot gets the tag of the lap before its first index, so that no
// byte left in the memory publishes an entry.
inline RingResult<RingMapping> ring_format(std::span<std::byte> mem, std::uint32_t capacity,
                                           std::uint32_t entry_size, std::uint32_t start,
                                           std::size_t seq_offset = kNoSeq) noexcept {
    if (RingError e = check_span(mem); e != RingError::ok) return e;
    if (!ring_capacity_ok(capacity)) return RingError::bad_capacity;
    const std::uint64_t bytes = ring_bytes(capacity, entry_size);
    if (mem.size() < bytes) return RingError::too_small;

    // Placement-new begins the header's lifetime in the mapping and zeroes every field.
    RingHeader* hdr = ::new (mem.data()) RingHeader{};
    hdr->version = kRingVersion;
    hdr->capacity = capacity;
    hdr->mask = capacity - 1;
    hdr->entry_size = entry_size;
    hdr->bytes = bytes;
    store_relaxed(hdr->prod, start);
    store_relaxed(hdr->cons, start);
    std::byte* slots = mem.data() + sizeof(RingHeader);
    if (seq_offset != kNoSeq) {
        for (std::uint32_t i = 0; i < capacity; ++i) {
            const std::uint32_t index = start + i;
            std::uint32_t stale = seq_tag(index - capacity);
            std::memcpy(slots + std::size_t{index & (capacity - 1)} * entry_size + seq_offset,
                        &stale, sizeof stale);
        }
    }
    // Magic last, with release: a peer that sees it sees a complete header.
    store_release(hdr->magic, kRingMagic);
    return RingMapping{hdr, slots, capacity, capacity - 1, start, start};
}

// Validates a header the peer formatted (and may since have scribbled on) and copies its
// geometry out. Every field is loaded exactly once.
inline RingResult<RingMapping> ring_validate(std::span<std::byte> mem,
                                             std::uint32_t entry_size) noexcept {
    if (RingError e = check_span(mem); e != RingError::ok) return e;
    // The header was created by the peer's init, possibly in another process; RingHeader is an
    // implicit-lifetime type, so the mapping is taken to hold one. Every shared word is read
    // with an atomic load because the peer may be writing it right now. Our own index is read
    // here once and is stable (only our side writes it); the peer's is checked against it.
    RingHeader* hdr = std::launder(reinterpret_cast<RingHeader*>(mem.data()));
    if (load_acquire(hdr->magic) != kRingMagic) return RingError::bad_magic;
    if (load_relaxed(hdr->version) != kRingVersion) return RingError::bad_version;
    const std::uint32_t capacity = load_relaxed(hdr->capacity);
    const std::uint32_t mask = load_relaxed(hdr->mask);
    if (!ring_capacity_ok(capacity) || mask != capacity - 1) return RingError::bad_capacity;
    if (load_relaxed(hdr->entry_size) != entry_size) return RingError::bad_entry_size;
    const std::uint64_t want = ring_bytes(capacity, entry_size);
    const std::uint64_t bytes =
        std::atomic_ref<std::uint64_t>(hdr->bytes).load(std::memory_order_relaxed);
    if (bytes != want) return RingError::bad_size;
    if (mem.size() < want) return RingError::too_small;
    const std::uint32_t prod = load_acquire(hdr->prod);
    const std::uint32_t cons = load_acquire(hdr->cons);
    if (prod - cons > capacity) return RingError::corrupt_indices;
    return RingMapping{hdr, mem.data() + sizeof(RingHeader), capacity, mask, prod, cons};
}

template <class T>
constexpr std::size_t seq_offset() noexcept {
    if constexpr (SequencedEntry<T>)
        return offsetof(T, seq);
    else
        return kNoSeq;
}

// The bytes of `e` to copy: all of it, or what a sized entry says it uses, within
// [kRingCacheLine, sizeof(T)] whatever it says.
template <class T>
std::size_t entry_bytes(const T& e) noexcept {
    if constexpr (SizedEntry<T>) {
        static_assert(sizeof(T) >= kRingCacheLine, "a sized entry is copied a line at least");
        const std::size_t n = e.used_bytes();
        return n < kRingCacheLine ? kRingCacheLine : n > sizeof(T) ? sizeof(T) : n;
    } else {
        return sizeof(T);
    }
}

template <class T>
std::uint32_t& slot_seq(std::byte* slot) noexcept {
    return std::launder(reinterpret_cast<T*>(slot))->seq;
}

}  // namespace detail

// The producing side of a ring: copies entries into slots and publishes them.
// A non-owning view over the mapping; copyable, but only one copy may produce at a time.
template <class T>
class RingProducer {
    static_assert(std::is_trivially_copyable_v<T>, "ring entries are copied as bytes");
    static_assert(alignof(T) <= kRingCacheLine);
    static_assert(sizeof(T) <= UINT32_MAX);

  public:
    using value_type = T;

    // Formats a fresh, empty ring of `capacity` entries in `mem` and returns its producer.
    // `start` is the initial value of both indices (tests start near UINT32_MAX to wrap).
    static RingResult<RingProducer> init(std::span<std::byte> mem, std::uint32_t capacity,
                                         std::uint32_t start = 0) noexcept {
        auto m = detail::ring_format(mem, capacity, sizeof(T), start, detail::seq_offset<T>());
        if (!m) return m.error();
        return RingProducer(*m);
    }

    // Attaches to a ring the peer formatted, validating everything it reads.
    static RingResult<RingProducer> attach(std::span<std::byte> mem) noexcept {
        auto m = detail::ring_validate(mem, sizeof(T));
        if (!m) return m.error();
        return RingProducer(*m);
    }

    // Copies one entry in and publishes it; false if the ring is full or corrupt.
    bool try_push(const T& item) noexcept {
        if (!try_stage(item)) return false;
        publish();
        return true;
    }

    // Copies one entry in without storing the producer index (publish() does): a sequenced
    // entry is visible to the consumer at once, so a list of posts stores the index once.
    bool try_stage(const T& item) noexcept {
        if (prod_ - cons_cache_ == capacity_ && free_after_refresh() == 0) return false;
        write(prod_, item);
        ++prod_;
        return true;
    }

    // Stores the producer index: what try_stage wrote is then visible to every consumer.
    void publish() noexcept { detail::store_release(hdr_->prod, prod_); }

    // Copies in as many leading entries of `items` as fit, publishes them and returns how many.
    std::uint32_t push_burst(std::span<const T> items) noexcept {
        std::uint32_t n =
            items.size() < capacity_ ? static_cast<std::uint32_t>(items.size()) : capacity_;
        std::uint32_t free = capacity_ - (prod_ - cons_cache_);
        if (free < n) {
            free = free_after_refresh();
            if (free < n) n = free;
        }
        if (n == 0) return 0;
        if constexpr (SequencedEntry<T>) {
            for (std::uint32_t i = 0; i < n; ++i) write(prod_ + i, items[i]);
        } else {
            const std::uint32_t idx = prod_ & mask_;
            const std::uint32_t first = n < capacity_ - idx ? n : capacity_ - idx;
            std::memcpy(slots_ + std::size_t{idx} * sizeof(T), items.data(), first * sizeof(T));
            std::memcpy(slots_, items.data() + first, std::size_t{n - first} * sizeof(T));
        }
        prod_ += n;
        publish();
        return n;
    }

    // Entries produced and not yet consumed (reloads the consumer index).
    std::uint32_t size() noexcept { return capacity_ - free_space(); }
    // Slots free for pushing (reloads the consumer index); 0 once corrupt.
    std::uint32_t free_space() noexcept { return free_after_refresh(); }
    std::uint32_t capacity() const noexcept { return capacity_; }
    // True once the consumer index was seen to be impossible; the ring then stays full.
    bool corrupt() const noexcept { return corrupt_; }
    // Our index: how many entries were ever pushed (from the start index, wrapping).
    std::uint32_t produced() const noexcept { return prod_; }
    // A copy of the entry pushed at `index`, as long as no later push reused its slot (the
    // caller knows: index within the last capacity() pushed). For a consumer that is gone.
    T entry(std::uint32_t index) const noexcept {
        T out;
        std::memcpy(&out, slot(index), sizeof(T));
        return out;
    }

  private:
    explicit RingProducer(const detail::RingMapping& m) noexcept
        : hdr_(m.hdr),
          slots_(m.slots),
          capacity_(m.capacity),
          mask_(m.mask),
          prod_(m.prod),
          cons_cache_(m.cons) {}

    std::byte* slot(std::uint32_t index) const noexcept {
        return slots_ + std::size_t{index & mask_} * sizeof(T);
    }

    // Writes `item` into the slot of `index`; a sequenced entry's seq last, with release, and
    // never through the copy, so that the consumer cannot see the tag before the entry.
    void write(std::uint32_t index, const T& item) noexcept {
        std::byte* s = slot(index);
        if constexpr (SequencedEntry<T>) {
            constexpr std::size_t off = offsetof(T, seq);
            constexpr std::size_t after = off + sizeof(std::uint32_t);
            const std::size_t n = detail::entry_bytes(item);
            const auto* src = reinterpret_cast<const std::byte*>(&item);
            std::memcpy(s, src, off);
            std::memcpy(s + after, src + after, n - after);
            detail::store_release(detail::slot_seq<T>(s), detail::seq_tag(index));
        } else {
            std::memcpy(s, &item, sizeof(T));
        }
    }

    // Reloads the consumer index and returns the free slots. An honest consumer's index only
    // moves forward and never passes ours (one unsigned compare checks both, as a backward
    // step wraps to a huge distance); anything else marks the ring corrupt, after which the
    // cache is pinned so that the fast-path checks see a full ring.
    std::uint32_t free_after_refresh() noexcept {
        if (corrupt_) return 0;
        const std::uint32_t cons = detail::load_acquire(hdr_->cons);
        if (cons - cons_cache_ > prod_ - cons_cache_) {
            corrupt_ = true;
            cons_cache_ = prod_ - capacity_;
            return 0;
        }
        cons_cache_ = cons;
        return capacity_ - (prod_ - cons);
    }

    RingHeader* hdr_;
    std::byte* slots_;
    std::uint32_t capacity_;
    std::uint32_t mask_;
    std::uint32_t prod_;        // our index; the shared copy is written, never read back
    std::uint32_t cons_cache_;  // last consumer index seen
    bool corrupt_ = false;
};

// The consuming side of a ring: copies published entries out and frees their slots.
// A non-owning view over the mapping; copyable, but only one copy may consume at a time.
// Entries are copied out once; validate the copy, never the slot.
template <class T>
class RingConsumer {
    static_assert(std::is_trivially_copyable_v<T>, "ring entries are copied as bytes");
    static_assert(alignof(T) <= kRingCacheLine);
    static_assert(sizeof(T) <= UINT32_MAX);

  public:
    using value_type = T;

    // Formats a fresh, empty ring of `capacity` entries in `mem` and returns its consumer.
    // `start` is the initial value of both indices (tests start near UINT32_MAX to wrap).
    static RingResult<RingConsumer> init(std::span<std::byte> mem, std::uint32_t capacity,
                                         std::uint32_t start = 0) noexcept {
        auto m = detail::ring_format(mem, capacity, sizeof(T), start, detail::seq_offset<T>());
        if (!m) return m.error();
        return RingConsumer(*m);
    }

    // Attaches to a ring the peer formatted, validating everything it reads.
    static RingResult<RingConsumer> attach(std::span<std::byte> mem) noexcept {
        auto m = detail::ring_validate(mem, sizeof(T));
        if (!m) return m.error();
        return RingConsumer(*m);
    }

    // Copies the oldest entry out into `out`; false if the ring is empty or corrupt.
    bool try_pop(T& out) noexcept {
        if constexpr (SequencedEntry<T>) {
            if (!read(cons_, out)) return false;
        } else {
            if (prod_cache_ == cons_ && avail_after_refresh() == 0) return false;
            std::memcpy(&out, slot(cons_), sizeof(T));
        }
        ++cons_;
        detail::store_release(hdr_->cons, cons_);
        return true;
    }

    // Copies up to out.size() of the oldest entries into `out` and returns how many.
    std::uint32_t pop_burst(std::span<T> out) noexcept {
        std::uint32_t n =
            out.size() < capacity_ ? static_cast<std::uint32_t>(out.size()) : capacity_;
        if constexpr (SequencedEntry<T>) {
            std::uint32_t got = 0;
            while (got < n && read(cons_ + got, out[got])) ++got;
            n = got;
        } else {
            std::uint32_t avail = prod_cache_ - cons_;
            if (avail < n) {
                avail = avail_after_refresh();
                if (avail < n) n = avail;
            }
            if (n == 0) return 0;
            const std::uint32_t idx = cons_ & mask_;
            const std::uint32_t first = n < capacity_ - idx ? n : capacity_ - idx;
            std::memcpy(out.data(), slots_ + std::size_t{idx} * sizeof(T), first * sizeof(T));
            std::memcpy(out.data() + first, slots_, std::size_t{n - first} * sizeof(T));
        }
        if (n == 0) return 0;
        cons_ += n;
        detail::store_release(hdr_->cons, cons_);
        return n;
    }

    // True if an entry is ready to pop. A sequenced ring reads only the next slot's seq, so
    // this is what a poll of an empty ring costs.
    bool ready() noexcept {
        if constexpr (SequencedEntry<T>)
            return published(cons_);
        else
            return prod_cache_ != cons_ || avail_after_refresh() != 0;
    }

    // Entries ready to pop (reloads the producer index); 0 once corrupt. A sequenced ring
    // counts the slots whose seq publishes them, up to `most` of them.
    std::uint32_t size(std::uint32_t most = UINT32_MAX) noexcept {
        if constexpr (SequencedEntry<T>) {
            if (most > capacity_) most = capacity_;
            std::uint32_t n = 0;
            while (n < most && published(cons_ + n)) ++n;
            return n;
        } else {
            const std::uint32_t n = avail_after_refresh();
            return n < most ? n : most;
        }
    }
    // Slots the producer could still fill (reloads the producer index).
    std::uint32_t free_space() noexcept { return capacity_ - size(); }
    std::uint32_t capacity() const noexcept { return capacity_; }
    // True once the producer index was seen to be impossible; the ring then stays empty.
    bool corrupt() const noexcept { return corrupt_; }
    // Our index: how many entries were ever popped (from the start index, wrapping).
    std::uint32_t consumed() const noexcept { return cons_; }

  private:
    explicit RingConsumer(const detail::RingMapping& m) noexcept
        : hdr_(m.hdr),
          slots_(m.slots),
          capacity_(m.capacity),
          mask_(m.mask),
          cons_(m.cons),
          prod_cache_(m.prod) {}

    std::byte* slot(std::uint32_t index) const noexcept {
        return slots_ + std::size_t{index & mask_} * sizeof(T);
    }

    // Whether the slot of `index` holds the entry of that index (its seq says so).
    bool published(std::uint32_t index) noexcept {
        return detail::load_acquire(detail::slot_seq<T>(slot(index))) == detail::seq_tag(index);
    }

    // Copies the entry at `index` out if its seq publishes it: its first line, then as much
    // more as that copy says it uses (bounded by entry_bytes), never trusting the slot twice.
    bool read(std::uint32_t index, T& out) noexcept {
        if (!published(index)) return false;
        std::byte* s = slot(index);
        auto* dst = reinterpret_cast<std::byte*>(&out);
        if constexpr (SizedEntry<T>) {
            std::memcpy(dst, s, kRingCacheLine);
            const std::size_t n = detail::entry_bytes(out);
            std::memcpy(dst + kRingCacheLine, s + kRingCacheLine, n - kRingCacheLine);
        } else {
            std::memcpy(dst, s, sizeof(T));
        }
        return true;
    }

    // Reloads the producer index and returns the entries available. An honest producer's
    // index only moves forward and never gets more than capacity ahead of ours (one unsigned
    // compare checks both, as a backward step wraps to a huge distance); anything else marks
    // the ring corrupt, after which the cache is pinned so that the ring reads as empty and
    // no slot is touched.
    std::uint32_t avail_after_refresh() noexcept {
        if (corrupt_) return 0;
        const std::uint32_t prod = detail::load_acquire(hdr_->prod);
        if (prod - prod_cache_ > capacity_ - (prod_cache_ - cons_)) {
            corrupt_ = true;
            prod_cache_ = cons_;
            return 0;
        }
        prod_cache_ = prod;
        return prod - cons_;
    }

    RingHeader* hdr_;
    std::byte* slots_;
    std::uint32_t capacity_;
    std::uint32_t mask_;
    std::uint32_t cons_;        // our index; the shared copy is written, never read back
    std::uint32_t prod_cache_;  // last producer index seen
    bool corrupt_ = false;
};

}  // namespace snic::shm
