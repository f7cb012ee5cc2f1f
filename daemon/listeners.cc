#include "daemon/listeners.h"

namespace snic::daemon {

namespace {

constexpr std::uint64_t pack(ListenerTable::Listener l) {
    return std::uint64_t{l.session} << 32 | l.handle;
}

constexpr ListenerTable::Listener unpack(std::uint64_t v) {
    return {static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v)};
}

}  // namespace

ListenerTable::ListenerTable() = default;

std::uint32_t ListenerTable::home(std::uint64_t key) {
    // Fibonacci hashing: service IDs and ports differ in few, low bits.
    return static_cast<std::uint32_t>((key * 0x9e3779b97f4a7c15ull) >> 40) & (kSlots - 1);
}

bool ListenerTable::bind(std::uint64_t key, Listener l) {
    if (key == kEmpty || key == kTombstone) return false;
    Slot* free = nullptr;
    const std::uint32_t h = home(key);
    for (std::uint32_t i = 0; i < kMaxProbe; ++i) {
        Slot& s = slots_[(h + i) & (kSlots - 1)];
        const std::uint64_t k = s.key.load(std::memory_order_relaxed);
        if (k == key) return false;
        if (k == kTombstone && free == nullptr) free = &s;
        if (k == kEmpty) {
            if (free == nullptr) free = &s;
            break;
        }
    }
    if (free == nullptr) return false;
    // The value first, then the key that makes it visible.
    free->value.store(pack(l), std::memory_order_relaxed);
    free->key.store(key, std::memory_order_release);
    ++size_;
    return true;
}

bool ListenerTable::unbind(std::uint64_t key) {
    if (key == kEmpty || key == kTombstone) return false;
    const std::uint32_t h = home(key);
    for (std::uint32_t i = 0; i < kMaxProbe; ++i) {
        Slot& s = slots_[(h + i) & (kSlots - 1)];
        const std::uint64_t k = s.key.load(std::memory_order_relaxed);
        if (k == kEmpty) return false;
        if (k != key) continue;
        s.key.store(kTombstone, std::memory_order_release);
        --size_;
        return true;
    }
    return false;
}

std::optional<ListenerTable::Listener> ListenerTable::find(std::uint64_t key) const {
    if (key == kEmpty || key == kTombstone) return std::nullopt;
    const std::uint32_t h = home(key);
    for (std::uint32_t i = 0; i < kMaxProbe; ++i) {
        const Slot& s = slots_[(h + i) & (kSlots - 1)];
        const std::uint64_t k = s.key.load(std::memory_order_acquire);
        if (k == kEmpty) return std::nullopt;
        if (k != key) continue;
        const std::uint64_t v = s.value.load(std::memory_order_acquire);
        // Unbound (and maybe rebound to another listener) while we read: the value may be the
        // new binding's, so the pair is only trusted if the key never left the slot.
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.key.load(std::memory_order_relaxed) != key) return std::nullopt;
        return unpack(v);
    }
    return std::nullopt;
}

}  // namespace snic::daemon
