// Who listens where, for connection management on the lcore: a connection request that
// arrives (an IB CM REQ to a service ID on QP1, a TCP SYN to a port for MPA) is matched to
// the session that listens there without the lcore taking a lock or waiting for the control
// thread. The control thread alone binds and unbinds; any number of lcores look up.
//
// Open addressing with linear probing over a fixed table of slots, each a key and a value
// published with release stores and read back as a pair that is checked not to have changed
// under the reader (a reader never returns a key with another binding's value). Unbinding
// leaves a tombstone so that probe chains stay whole; a tombstone is reused by a later bind.
// Probes are bounded, so a lookup costs at most kMaxProbe slots whatever the table holds.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

namespace snic::daemon {

class ListenerTable {
  public:
    // What a listener is to the control thread: its session and the session's handle for it.
    struct Listener {
        std::uint32_t session = 0;
        std::uint32_t handle = 0;
        friend constexpr bool operator==(Listener, Listener) = default;
    };

    static constexpr std::uint32_t kSlots = 1024;  // a power of two
    static constexpr std::uint32_t kMaxProbe = 32;
    // Keys are the transport's: a service ID, or a TCP port with the transport in high bits.
    // These two values are the table's own and never a key.
    static constexpr std::uint64_t kEmpty = 0;
    static constexpr std::uint64_t kTombstone = ~std::uint64_t{0};

    ListenerTable();

    // --- control thread ---
    // Binds `key` to `l`. False when `key` is bound already, is a reserved value, or its
    // probe window is full.
    bool bind(std::uint64_t key, Listener l);
    // Unbinds `key`; false when it was not bound. A reader that found it just before may
    // still act on it: the session checks its listener handle when the request reaches it.
    bool unbind(std::uint64_t key);
    std::uint32_t size() const { return size_; }

    // --- any thread (the lcore) ---
    std::optional<Listener> find(std::uint64_t key) const;

  private:
    struct Slot {
        std::atomic<std::uint64_t> key{kEmpty};
        std::atomic<std::uint64_t> value{0};  // (session << 32) | handle
    };
    static std::uint32_t home(std::uint64_t key);
    std::array<Slot, kSlots> slots_;
    std::uint32_t size_ = 0;  // control thread only
};

}  // namespace snic::daemon
