// A table from 32-bit keys to pointers that the datapath reads without a lock: the
// provider's LMR contexts (checked on every post) and QP numbers (an SRQ completion
// names its EP by QPN).
//
// Open addressing with linear probing. Readers load the current array and probe it with
// acquire loads; writers (rare: registration, QP creation) serialise on a mutex, insert
// into the array or, past half full, publish a copy twice the size. Replaced arrays are
// kept until the table goes, so a reader still probing one never touches freed memory.
// A removed key leaves a tombstone (its key, a null value) until the next copy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace snic::dapl {

template <class V>
class KeyTable {
  public:
    KeyTable() { publish(std::make_unique<Array>(kFirst)); }

    // The value for `key`, or nullptr. Lock-free.
    V* find(std::uint32_t key) const {
        const Array* a = current_.load(std::memory_order_acquire);
        const std::size_t mask = a->slots.size() - 1;
        for (std::size_t i = hash(key) & mask, n = 0; n <= mask; i = (i + 1) & mask, ++n) {
            const Slot& s = a->slots[i];
            if (!s.used.load(std::memory_order_acquire)) return nullptr;
            if (s.key.load(std::memory_order_relaxed) == key)
                return s.value.load(std::memory_order_acquire);
        }
        return nullptr;
    }

    // Sets `key` to `value` (a null value removes it).
    void put(std::uint32_t key, V* value) {
        std::lock_guard lock(mu_);
        Array* a = current_.load(std::memory_order_relaxed);
        if (value != nullptr && 2 * (a->used + 1) > a->slots.size()) {
            auto bigger = std::make_unique<Array>(a->slots.size() * 2);
            for (const Slot& s : a->slots)
                if (V* v = s.value.load(std::memory_order_relaxed); v != nullptr)
                    insert(*bigger, s.key.load(std::memory_order_relaxed), v);
            a = publish(std::move(bigger));
        }
        insert(*a, key, value);
    }

    std::size_t capacity() const { return current_.load(std::memory_order_acquire)->slots.size(); }

  private:
    static constexpr std::size_t kFirst = 64;

    struct Slot {
        std::atomic<bool> used{false};
        std::atomic<std::uint32_t> key{0};
        std::atomic<V*> value{nullptr};
    };
    struct Array {
        explicit Array(std::size_t n) : slots(n) {}
        std::vector<Slot> slots;
        std::size_t used = 0;  // slots ever taken, tombstones included
    };

    static std::size_t hash(std::uint32_t key) {
        return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 32);
    }

    // Under mu_: the key's slot (taking a free one when new) set to value.
    static void insert(Array& a, std::uint32_t key, V* value) {
        const std::size_t mask = a.slots.size() - 1;
        for (std::size_t i = hash(key) & mask;; i = (i + 1) & mask) {
            Slot& s = a.slots[i];
            if (!s.used.load(std::memory_order_relaxed)) {
                if (value == nullptr) return;  // removing a key that is not there
                s.key.store(key, std::memory_order_relaxed);
                s.value.store(value, std::memory_order_release);
                s.used.store(true, std::memory_order_release);
                ++a.used;
                return;
            }
            if (s.key.load(std::memory_order_relaxed) == key) {
                s.value.store(value, std::memory_order_release);
                return;
            }
        }
    }

    Array* publish(std::unique_ptr<Array> a) {
        Array* raw = a.get();
        arrays_.push_back(std::move(a));
        current_.store(raw, std::memory_order_release);
        return raw;
    }

    std::mutex mu_;
    std::vector<std::unique_ptr<Array>> arrays_;  // every array published, oldest first
    std::atomic<Array*> current_{nullptr};
};

}  // namespace snic::dapl
