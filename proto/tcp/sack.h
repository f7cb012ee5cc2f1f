// Selective acknowledgment (RFC 2018) on both sides, over 64-bit sequence offsets
// (seq.h): the receiver's list of out-of-order ranges it holds, in the order RFC 2018 §4
// wants them reported, and the sender's scoreboard of ranges the peer SACKed, with the
// queries of RFC 6675 §4 (IsLost, the SACKed bytes and blocks above a point). Both are
// fixed arrays: nothing is allocated.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace snic::tcp {

struct Range {
    std::uint64_t start = 0;  // first offset
    std::uint64_t end = 0;    // one past the last
    std::uint64_t size() const { return end - start; }
    friend constexpr bool operator==(const Range&, const Range&) = default;
};

// The receiver's out-of-order data: disjoint ranges above RCV.NXT, most recently changed
// first (RFC 2018 §4: the first block reports the newest segment, then the most recently
// reported ones).
class OooBlocks {
  public:
    static constexpr std::size_t kMax = 16;

    // Records [start, end). Returns false, recording nothing, when this would need a block
    // beyond kMax (the caller drops the segment: the store is bounded).
    bool add(std::uint64_t start, std::uint64_t end);
    // RCV.NXT reached `nxt`: removes the blocks it covers and returns the new RCV.NXT (past
    // a block that starts at or below it).
    std::uint64_t advance(std::uint64_t nxt);
    // True when [start, end) is wholly held.
    bool holds(std::uint64_t start, std::uint64_t end) const;
    // The highest offset held plus one (0 when empty).
    std::uint64_t highest() const;

    std::size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    const Range& operator[](std::size_t i) const { return b_[i]; }
    std::uint64_t bytes() const;
    void clear() { n_ = 0; }

  private:
    void remove(std::size_t i);
    std::array<Range, kMax> b_{};
    std::size_t n_ = 0;
};

// The sender's scoreboard: disjoint ranges above SND.UNA the peer SACKed, sorted.
class Scoreboard {
  public:
    static constexpr std::size_t kMax = 32;

    // A SACK block [start, end), already checked to lie within (SND.UNA, SND.MAX]. When the
    // board is full, the lowest ranges are kept (those are the ones loss recovery needs).
    void add(std::uint64_t start, std::uint64_t end);
    // SND.UNA moved to `una`: drops what lies below.
    void advance(std::uint64_t una);
    void clear() { n_ = 0; }

    bool is_sacked(std::uint64_t off) const;
    // The end of the SACKed range holding `off`, or `off` when it is not SACKed.
    std::uint64_t sacked_end(std::uint64_t off) const;
    // The start of the first SACKed range above `off` (`limit` when none).
    std::uint64_t next_sacked(std::uint64_t off, std::uint64_t limit) const;
    // SACKed bytes above `off`, and the ranges wholly above it.
    std::uint64_t bytes_above(std::uint64_t off) const;
    std::size_t blocks_above(std::uint64_t off) const;
    // RFC 6675 §4 IsLost(off): dupthresh discontiguous SACKed ranges above it, or more than
    // (dupthresh - 1) * smss bytes SACKed above it. (Ranges stand for the "sequences" of the
    // RFC: a receiver reports contiguous SACKed data as one block.)
    bool is_lost(std::uint64_t off, std::uint32_t smss, std::uint32_t dupthresh = 3) const;
    // The highest SACKed offset plus one (0 when empty).
    std::uint64_t highest() const { return n_ == 0 ? 0 : r_[n_ - 1].end; }
    std::uint64_t total() const;

    std::size_t size() const { return n_; }
    const Range& operator[](std::size_t i) const { return r_[i]; }

  private:
    std::array<Range, kMax> r_{};
    std::size_t n_ = 0;
};

}  // namespace snic::tcp
