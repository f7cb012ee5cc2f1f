// The receiver's out-of-order blocks and the sender's SACK scoreboard.
#include "proto/tcp/sack.h"

#include <algorithm>

namespace snic::tcp {

// --- OooBlocks -------------------------------------------------------------------------------

void OooBlocks::remove(std::size_t i) {
    for (std::size_t j = i + 1; j < n_; ++j) b_[j - 1] = b_[j];
    --n_;
}

bool OooBlocks::add(std::uint64_t start, std::uint64_t end) {
    if (start >= end) return true;
    Range merged{start, end};
    std::size_t overlapping = 0;
    for (std::size_t i = 0; i < n_; ++i)
        if (b_[i].start <= end && start <= b_[i].end) ++overlapping;
    if (overlapping == 0 && n_ == kMax) return false;
    for (std::size_t i = 0; i < n_;) {
        if (b_[i].start <= merged.end && merged.start <= b_[i].end) {
            merged.start = std::min(merged.start, b_[i].start);
            merged.end = std::max(merged.end, b_[i].end);
            remove(i);
        } else {
            ++i;
        }
    }
    for (std::size_t j = n_; j > 0; --j) b_[j] = b_[j - 1];
    b_[0] = merged;
    ++n_;
    return true;
}

std::uint64_t OooBlocks::advance(std::uint64_t nxt) {
    for (bool moved = true; moved;) {
        moved = false;
        for (std::size_t i = 0; i < n_; ++i) {
            if (b_[i].start <= nxt) {
                nxt = std::max(nxt, b_[i].end);
                remove(i);
                moved = true;
                break;
            }
        }
    }
    return nxt;
}

bool OooBlocks::holds(std::uint64_t start, std::uint64_t end) const {
    for (std::size_t i = 0; i < n_; ++i)
        if (b_[i].start <= start && end <= b_[i].end) return true;
    return false;
}

std::uint64_t OooBlocks::highest() const {
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < n_; ++i) h = std::max(h, b_[i].end);
    return h;
}

std::uint64_t OooBlocks::bytes() const {
    std::uint64_t t = 0;
    for (std::size_t i = 0; i < n_; ++i) t += b_[i].size();
    return t;
}

// --- Scoreboard ------------------------------------------------------------------------------

void Scoreboard::add(std::uint64_t start, std::uint64_t end) {
    if (start >= end) return;
    // Merge with every range it touches, then insert in order.
    std::size_t i = 0;
    while (i < n_ && r_[i].end < start) ++i;
    std::size_t j = i;
    while (j < n_ && r_[j].start <= end) {
        start = std::min(start, r_[j].start);
        end = std::max(end, r_[j].end);
        ++j;
    }
    const std::size_t removed = j - i;
    if (removed == 0) {
        if (n_ == kMax) {
            if (i == n_) return;  // above everything on a full board: forgotten
            --n_;                 // the highest range gives way
        }
        for (std::size_t k = n_; k > i; --k) r_[k] = r_[k - 1];
        ++n_;
    } else {
        for (std::size_t k = j; k < n_; ++k) r_[k - removed + 1] = r_[k];
        n_ = n_ - removed + 1;
    }
    r_[i] = Range{start, end};
}

void Scoreboard::advance(std::uint64_t una) {
    std::size_t drop = 0;
    while (drop < n_ && r_[drop].end <= una) ++drop;
    for (std::size_t k = drop; k < n_; ++k) r_[k - drop] = r_[k];
    n_ -= drop;
    if (n_ > 0 && r_[0].start < una) r_[0].start = una;
}

bool Scoreboard::is_sacked(std::uint64_t off) const {
    for (std::size_t i = 0; i < n_; ++i)
        if (r_[i].start <= off && off < r_[i].end) return true;
    return false;
}

std::uint64_t Scoreboard::sacked_end(std::uint64_t off) const {
    for (std::size_t i = 0; i < n_; ++i)
        if (r_[i].start <= off && off < r_[i].end) return r_[i].end;
    return off;
}

std::uint64_t Scoreboard::next_sacked(std::uint64_t off, std::uint64_t limit) const {
    for (std::size_t i = 0; i < n_; ++i)
        if (r_[i].start > off) return std::min(r_[i].start, limit);
    return limit;
}

std::uint64_t Scoreboard::bytes_above(std::uint64_t off) const {
    std::uint64_t t = 0;
    for (std::size_t i = 0; i < n_; ++i)
        if (r_[i].end > off) t += r_[i].end - std::max(r_[i].start, off + 1);
    return t;
}

std::size_t Scoreboard::blocks_above(std::uint64_t off) const {
    std::size_t c = 0;
    for (std::size_t i = 0; i < n_; ++i)
        if (r_[i].start > off) ++c;
    return c;
}

bool Scoreboard::is_lost(std::uint64_t off, std::uint32_t smss, std::uint32_t dupthresh) const {
    if (is_sacked(off)) return false;
    return blocks_above(off) >= dupthresh || bytes_above(off) > std::uint64_t{dupthresh - 1} * smss;
}

std::uint64_t Scoreboard::total() const {
    std::uint64_t t = 0;
    for (std::size_t i = 0; i < n_; ++i) t += r_[i].size();
    return t;
}

}  // namespace snic::tcp
