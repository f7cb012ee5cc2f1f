// Unit tests of the shared-memory SPSC ring (shm/ring.h), one test per rule.
#include "shm/ring.h"

#include "shm/wqe.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <thread>
#include <vector>

namespace {

using snic::shm::Cqe;
using snic::shm::kRingMagic;
using snic::shm::RecvWqe;
using snic::shm::ring_bytes;
using snic::shm::RingConsumer;
using snic::shm::RingError;
using snic::shm::RingHeader;
using snic::shm::RingProducer;
using snic::shm::SendWqe;

// 64-byte aligned backing store standing in for a shared mapping.
class Mem {
  public:
    explicit Mem(std::size_t bytes) : buf_((bytes + 63) / 64) {}
    std::span<std::byte> span() { return std::as_writable_bytes(std::span(buf_)); }
    std::span<std::byte> span(std::size_t bytes) { return span().first(bytes); }
    RingHeader& header() { return *reinterpret_cast<RingHeader*>(buf_.data()); }

  private:
    struct alignas(64) Line {
        std::byte b[64];
    };
    std::vector<Line> buf_;
};

// Both views of one ring of T, formatted by the producer and attached by the consumer, as snicd
// and a client would do.
template <class T>
struct RingPair {
    explicit RingPair(std::uint32_t capacity, std::uint32_t start = 0)
        : mem(ring_bytes<T>(capacity)),
          prod(RingProducer<T>::init(mem.span(), capacity, start).value()),
          cons(RingConsumer<T>::attach(mem.span()).value()) {}
    // The bytes of the slot of `index`, as the peer's memory holds them.
    std::byte* slot(std::uint32_t index) {
        const std::uint32_t mask = mem.header().mask;
        return mem.span().data() + sizeof(RingHeader) + std::size_t{index & mask} * sizeof(T);
    }
    Mem mem;
    RingProducer<T> prod;
    RingConsumer<T> cons;
};
using Pair = RingPair<std::uint64_t>;

TEST(Ring, header_layout_puts_each_index_on_its_own_cache_line) {
    EXPECT_EQ(sizeof(RingHeader), 256u);
    EXPECT_EQ(offsetof(RingHeader, prod) / 64, 1u);
    EXPECT_EQ(offsetof(RingHeader, cons) / 64, 2u);
    EXPECT_EQ(ring_bytes<std::uint64_t>(1024), 256u + 1024u * 8u);
}

TEST(Ring, fresh_ring_is_empty) {
    Pair r(8);
    std::uint64_t v = 0;
    EXPECT_FALSE(r.cons.try_pop(v));
    std::array<std::uint64_t, 4> out{};
    EXPECT_EQ(r.cons.pop_burst(out), 0u);
    EXPECT_EQ(r.cons.size(), 0u);
    EXPECT_EQ(r.prod.size(), 0u);
    EXPECT_EQ(r.prod.free_space(), 8u);
    EXPECT_EQ(r.cons.free_space(), 8u);
}

TEST(Ring, full_ring_rejects_push_until_one_is_popped) {
    Pair r(8);
    for (std::uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(r.prod.try_push(i));
    EXPECT_FALSE(r.prod.try_push(99));
    EXPECT_EQ(r.prod.free_space(), 0u);
    EXPECT_EQ(r.prod.size(), 8u);
    EXPECT_EQ(r.cons.size(), 8u);

    std::uint64_t v = 0;
    ASSERT_TRUE(r.cons.try_pop(v));
    EXPECT_EQ(v, 0u);
    EXPECT_TRUE(r.prod.try_push(8));
    EXPECT_FALSE(r.prod.try_push(99));

    for (std::uint64_t i = 1; i <= 8; ++i) {
        ASSERT_TRUE(r.cons.try_pop(v));
        EXPECT_EQ(v, i);
    }
    EXPECT_FALSE(r.cons.try_pop(v));
    EXPECT_FALSE(r.prod.corrupt());
    EXPECT_FALSE(r.cons.corrupt());
}

TEST(Ring, capacity_of_one_alternates_full_and_empty) {
    Pair r(1);
    std::uint64_t v = 0;
    for (std::uint64_t i = 0; i < 5; ++i) {
        ASSERT_TRUE(r.prod.try_push(i));
        EXPECT_FALSE(r.prod.try_push(i));
        ASSERT_TRUE(r.cons.try_pop(v));
        EXPECT_EQ(v, i);
        EXPECT_FALSE(r.cons.try_pop(v));
    }
}

TEST(Ring, indices_wrap_around_at_2_32) {
    constexpr std::uint32_t kStart = std::numeric_limits<std::uint32_t>::max() - 20;
    Pair r(16, kStart);
    std::uint64_t next_in = 0, next_out = 0;
    // 40 rounds of 7 in / 7 out take the indices from 2^32 - 21 across zero.
    for (int round = 0; round < 40; ++round) {
        for (int i = 0; i < 7; ++i) ASSERT_TRUE(r.prod.try_push(next_in++));
        EXPECT_EQ(r.cons.size(), 7u);
        EXPECT_EQ(r.prod.free_space(), 9u);
        std::uint64_t v = 0;
        for (int i = 0; i < 7; ++i) {
            ASSERT_TRUE(r.cons.try_pop(v));
            ASSERT_EQ(v, next_out++);
        }
    }
    // The shared indices have wrapped past zero.
    EXPECT_EQ(r.mem.header().prod, kStart + 280u);
    EXPECT_LT(r.mem.header().prod, kStart);
    EXPECT_EQ(r.mem.header().cons, r.mem.header().prod);
    EXPECT_FALSE(r.cons.corrupt());
}

TEST(Ring, full_and_empty_are_told_apart_across_the_index_wrap) {
    // Index 2^32 - 4: filling 8 entries puts prod past zero while cons is still below it.
    Pair r(8, std::numeric_limits<std::uint32_t>::max() - 3);
    std::array<std::uint64_t, 8> in{};
    std::iota(in.begin(), in.end(), 100);
    EXPECT_EQ(r.prod.push_burst(in), 8u);
    EXPECT_EQ(r.cons.size(), 8u);
    EXPECT_FALSE(r.prod.try_push(0));
    std::array<std::uint64_t, 8> out{};
    EXPECT_EQ(r.cons.pop_burst(out), 8u);
    EXPECT_EQ(out, in);
    EXPECT_EQ(r.cons.size(), 0u);
    EXPECT_EQ(r.prod.free_space(), 8u);
}

TEST(Ring, burst_push_is_partial_when_nearly_full) {
    Pair r(8);
    std::array<std::uint64_t, 6> a{1, 2, 3, 4, 5, 6};
    EXPECT_EQ(r.prod.push_burst(a), 6u);
    std::array<std::uint64_t, 6> b{7, 8, 9, 10, 11, 12};
    EXPECT_EQ(r.prod.push_burst(b), 2u);
    EXPECT_EQ(r.prod.push_burst(b), 0u);
    std::array<std::uint64_t, 16> out{};
    ASSERT_EQ(r.cons.pop_burst(out), 8u);
    for (std::uint64_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], i + 1);
}

TEST(Ring, burst_pop_is_partial_when_nearly_empty) {
    Pair r(8);
    std::array<std::uint64_t, 3> in{10, 11, 12};
    ASSERT_EQ(r.prod.push_burst(in), 3u);
    std::array<std::uint64_t, 5> out{};
    EXPECT_EQ(r.cons.pop_burst(out), 3u);
    EXPECT_EQ(out[0], 10u);
    EXPECT_EQ(out[2], 12u);
    EXPECT_EQ(r.cons.pop_burst(out), 0u);
}

TEST(Ring, burst_larger_than_capacity_is_clamped) {
    Pair r(4);
    std::vector<std::uint64_t> in(100, 7);
    EXPECT_EQ(r.prod.push_burst(in), 4u);
    std::vector<std::uint64_t> out(100);
    EXPECT_EQ(r.cons.pop_burst(out), 4u);
}

TEST(Ring, burst_crossing_the_end_of_the_slots_splits_and_keeps_order) {
    Pair r(8);
    std::uint64_t next_in = 0, next_out = 0;
    std::vector<std::uint64_t> buf(5);
    // Bursts of 5 on 8 slots start at every slot offset in turn.
    for (int round = 0; round < 16; ++round) {
        for (auto& x : buf) x = next_in++;
        ASSERT_EQ(r.prod.push_burst(buf), 5u);
        std::vector<std::uint64_t> out(5);
        ASSERT_EQ(r.cons.pop_burst(out), 5u);
        for (auto x : out) ASSERT_EQ(x, next_out++);
    }
}

TEST(Ring, entries_larger_than_a_word_round_trip) {
    struct Wqe {
        std::uint64_t id;
        std::uint32_t len;
        std::uint8_t op;
        std::uint8_t pad[3];
        std::uint64_t addr[3];
    };
    Mem mem(ring_bytes<Wqe>(4));
    auto p = RingProducer<Wqe>::init(mem.span(), 4);
    auto c = RingConsumer<Wqe>::attach(mem.span());
    ASSERT_TRUE(p && c);
    for (std::uint64_t i = 0; i < 10; ++i) {
        Wqe w{i, static_cast<std::uint32_t>(i * 3), static_cast<std::uint8_t>(i), {}, {i, i, i}};
        ASSERT_TRUE(p->try_push(w));
        Wqe got{};
        ASSERT_TRUE(c->try_pop(got));
        EXPECT_EQ(std::memcmp(&got, &w, sizeof w), 0);
    }
}

TEST(Ring, init_rejects_capacity_that_is_not_a_power_of_two) {
    Mem mem(ring_bytes<std::uint64_t>(1024));
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span(), 0).error(), RingError::bad_capacity);
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span(), 3).error(), RingError::bad_capacity);
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span(), 1000).error(), RingError::bad_capacity);
    EXPECT_EQ(RingConsumer<std::uint64_t>::init(mem.span(), 0x80000001u).error(),
              RingError::bad_capacity);
    EXPECT_TRUE(RingProducer<std::uint64_t>::init(mem.span(), 1024));
}

TEST(Ring, init_rejects_span_smaller_than_ring) {
    Mem mem(ring_bytes<std::uint64_t>(64));
    const std::size_t need = ring_bytes<std::uint64_t>(64);
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span(need - 1), 64).error(),
              RingError::too_small);
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span(100), 1).error(), RingError::too_small);
    // A capacity whose slots would not fit even in 64-bit arithmetic is refused, not wrapped.
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span(), 1u << 31).error(),
              RingError::too_small);
    EXPECT_TRUE(RingProducer<std::uint64_t>::init(mem.span(need), 64));
}

TEST(Ring, init_rejects_misaligned_span) {
    Mem mem(ring_bytes<std::uint64_t>(8) + 64);
    EXPECT_EQ(RingProducer<std::uint64_t>::init(mem.span().subspan(8), 8).error(),
              RingError::misaligned);
    EXPECT_EQ(RingConsumer<std::uint64_t>::attach(mem.span().subspan(32)).error(),
              RingError::misaligned);
}

// A formatted ring whose header each attach test then damages in one way.
class RingAttach : public ::testing::Test {
  protected:
    static constexpr std::uint32_t kCap = 16;
    Mem mem{ring_bytes<std::uint64_t>(kCap)};
    void SetUp() override { ASSERT_TRUE(RingProducer<std::uint64_t>::init(mem.span(), kCap)); }
    RingError attach_consumer() { return RingConsumer<std::uint64_t>::attach(mem.span()).error(); }
    RingError attach_producer() { return RingProducer<std::uint64_t>::attach(mem.span()).error(); }
};

TEST_F(RingAttach, accepts_a_well_formed_ring) {
    EXPECT_EQ(attach_consumer(), RingError::ok);
    EXPECT_EQ(attach_producer(), RingError::ok);
}

TEST_F(RingAttach, rejects_bad_magic) {
    mem.header().magic = kRingMagic ^ 1;
    EXPECT_EQ(attach_consumer(), RingError::bad_magic);
    EXPECT_EQ(attach_producer(), RingError::bad_magic);
}

TEST_F(RingAttach, rejects_zeroed_memory) {
    std::memset(mem.span().data(), 0, mem.span().size());
    EXPECT_EQ(attach_consumer(), RingError::bad_magic);
}

TEST_F(RingAttach, rejects_other_layout_version) {
    mem.header().version = snic::shm::kRingVersion + 1;
    EXPECT_EQ(attach_consumer(), RingError::bad_version);
}

TEST_F(RingAttach, rejects_capacity_that_is_not_a_power_of_two) {
    mem.header().capacity = 12;
    mem.header().mask = 11;
    EXPECT_EQ(attach_consumer(), RingError::bad_capacity);
}

TEST_F(RingAttach, rejects_zero_capacity) {
    mem.header().capacity = 0;
    mem.header().mask = 0xffffffffu;
    EXPECT_EQ(attach_consumer(), RingError::bad_capacity);
}

TEST_F(RingAttach, rejects_mask_that_does_not_match_capacity) {
    // A larger mask with an honest capacity would index past the slots.
    mem.header().mask = 0xffu;
    EXPECT_EQ(attach_consumer(), RingError::bad_capacity);
}

TEST_F(RingAttach, rejects_entry_size_other_than_sizeof_t) {
    EXPECT_EQ(RingConsumer<std::uint32_t>::attach(mem.span()).error(), RingError::bad_entry_size);
    mem.header().entry_size = 16;
    EXPECT_EQ(attach_consumer(), RingError::bad_entry_size);
}

TEST_F(RingAttach, rejects_capacity_larger_than_the_span) {
    // Self-consistent header for twice the slots the mapping holds.
    mem.header().capacity = kCap * 2;
    mem.header().mask = kCap * 2 - 1;
    mem.header().bytes = ring_bytes<std::uint64_t>(kCap * 2);
    EXPECT_EQ(attach_consumer(), RingError::too_small);
}

TEST_F(RingAttach, rejects_span_smaller_than_the_ring) {
    const std::size_t need = ring_bytes<std::uint64_t>(kCap);
    EXPECT_EQ(RingConsumer<std::uint64_t>::attach(mem.span(need - 8)).error(),
              RingError::too_small);
    EXPECT_EQ(RingConsumer<std::uint64_t>::attach(mem.span(64)).error(), RingError::too_small);
}

TEST_F(RingAttach, rejects_byte_size_inconsistent_with_geometry) {
    mem.header().bytes += 64;
    EXPECT_EQ(attach_consumer(), RingError::bad_size);
}

TEST_F(RingAttach, rejects_indices_further_apart_than_capacity) {
    mem.header().prod = mem.header().cons + kCap + 1;
    EXPECT_EQ(attach_consumer(), RingError::corrupt_indices);
    EXPECT_EQ(attach_producer(), RingError::corrupt_indices);
}

// A ring whose last slot ends exactly at a PROT_NONE page: any read past the slots faults.
class GuardedRing {
  public:
    static constexpr std::uint32_t kCap = 64;
    GuardedRing() {
        page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        const std::size_t bytes = ring_bytes<std::uint64_t>(kCap);
        data_pages_ = (bytes + page_ - 1) / page_;
        void* p = mmap(nullptr, (data_pages_ + 1) * page_, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return;
        base_ = static_cast<std::byte*>(p);
        mprotect(base_ + data_pages_ * page_, page_, PROT_NONE);
        ring_ = std::span(base_ + data_pages_ * page_ - bytes, bytes);
    }
    ~GuardedRing() {
        if (base_ != nullptr) munmap(base_, (data_pages_ + 1) * page_);
    }
    GuardedRing(const GuardedRing&) = delete;
    GuardedRing& operator=(const GuardedRing&) = delete;

    bool ok() const { return base_ != nullptr; }
    std::span<std::byte> span() const { return ring_; }
    RingHeader& header() const { return *reinterpret_cast<RingHeader*>(ring_.data()); }

  private:
    std::size_t page_ = 0;
    std::size_t data_pages_ = 0;
    std::byte* base_ = nullptr;
    std::span<std::byte> ring_;
};

TEST(Ring, corrupt_producer_index_is_detected_without_out_of_bounds_read) {
    GuardedRing g;
    ASSERT_TRUE(g.ok());
    auto p = RingProducer<std::uint64_t>::init(g.span(), GuardedRing::kCap);
    auto c = RingConsumer<std::uint64_t>::attach(g.span());
    ASSERT_TRUE(p && c);
    // Fill the ring so that a consumer believing a huge index would run off the end.
    for (std::uint64_t i = 0; i < GuardedRing::kCap - 4; ++i) ASSERT_TRUE(p->try_push(i));
    std::uint64_t v = 0;
    ASSERT_TRUE(c->try_pop(v));

    // The hostile producer claims a billion entries.
    g.header().prod = g.header().cons + 1'000'000'000u;
    // A burst asking for more than the consumer knows of reloads the index, sees it is
    // impossible, and from then on the ring reads as empty.
    std::vector<std::uint64_t> out(4096);
    EXPECT_EQ(c->pop_burst(out), 0u);
    EXPECT_TRUE(c->corrupt());
    EXPECT_FALSE(c->try_pop(v));
    EXPECT_EQ(c->size(), 0u);

    // Corruption is sticky: a later, plausible index does not revive the ring.
    g.header().prod = g.header().cons + 1;
    EXPECT_FALSE(c->try_pop(v));
    EXPECT_EQ(c->pop_burst(out), 0u);
    EXPECT_TRUE(c->corrupt());
}

TEST(Ring, producer_index_just_past_capacity_is_corrupt) {
    Pair r(16);
    r.mem.header().prod = r.mem.header().cons + 17;
    std::uint64_t v = 0;
    EXPECT_FALSE(r.cons.try_pop(v));
    EXPECT_TRUE(r.cons.corrupt());
}

TEST(Ring, producer_index_moving_backwards_is_corrupt) {
    Pair r(16);
    for (std::uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(r.prod.try_push(i));
    EXPECT_EQ(r.cons.size(), 10u);
    r.mem.header().prod -= 3;
    EXPECT_EQ(r.cons.size(), 0u);
    EXPECT_TRUE(r.cons.corrupt());
}

TEST(Ring, consumer_index_passing_the_producer_is_corrupt) {
    Pair r(16);
    for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(r.prod.try_push(i));
    // The hostile consumer claims it consumed entries never produced.
    r.mem.header().cons = r.mem.header().prod + 8;
    std::array<std::uint64_t, 16> in{};
    EXPECT_EQ(r.prod.push_burst(in), 0u);
    EXPECT_TRUE(r.prod.corrupt());
    EXPECT_FALSE(r.prod.try_push(0));
    EXPECT_TRUE(r.prod.corrupt());
    EXPECT_EQ(r.prod.free_space(), 0u);
}

TEST(Ring, consumer_index_moving_backwards_is_corrupt) {
    Pair r(16);
    for (std::uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(r.prod.try_push(i));
    std::array<std::uint64_t, 8> out{};
    ASSERT_EQ(r.cons.pop_burst(out), 8u);
    EXPECT_EQ(r.prod.free_space(), 16u);
    r.mem.header().cons -= 4;
    EXPECT_EQ(r.prod.free_space(), 0u);
    EXPECT_TRUE(r.prod.corrupt());
}

// Runs a producer and a consumer thread through a small ring with random burst sizes and checks
// that the consumer sees 0, 1, 2, ... exactly once each.
template <class Entry, class Make, class Check>
void stress(std::uint32_t capacity, std::uint32_t start, std::uint64_t count, Make make,
            Check check) {
    Mem mem(ring_bytes<Entry>(capacity));
    auto p = RingProducer<Entry>::init(mem.span(), capacity, start);
    auto c = RingConsumer<Entry>::attach(mem.span());
    ASSERT_TRUE(p && c);

    std::thread producer([&p, count, make] {
        std::minstd_rand rng(1);
        std::vector<Entry> buf(48);
        std::uint64_t next = 0;
        while (next < count) {
            std::size_t want = 1 + rng() % buf.size();
            if (want > count - next) want = static_cast<std::size_t>(count - next);
            for (std::size_t i = 0; i < want; ++i) buf[i] = make(next + i);
            std::size_t done = 0;
            while (done < want) {
                const std::uint32_t n =
                    want - done == 1 ? (p->try_push(buf[done]) ? 1u : 0u)
                                     : p->push_burst(std::span(buf).subspan(done, want - done));
                if (n == 0) std::this_thread::yield();
                done += n;
            }
            next += want;
        }
    });

    std::minstd_rand rng(2);
    std::vector<Entry> buf(48);
    std::uint64_t expect = 0, mismatches = 0;
    while (expect < count && !c->corrupt()) {
        const std::size_t want = 1 + rng() % buf.size();
        std::uint32_t n = 0;
        if (want == 1) {
            n = c->try_pop(buf[0]) ? 1 : 0;
        } else {
            n = c->pop_burst(std::span(buf).first(want));
        }
        if (n == 0) std::this_thread::yield();
        for (std::uint32_t i = 0; i < n; ++i) mismatches += check(buf[i], expect++) ? 0 : 1;
    }
    producer.join();

    EXPECT_FALSE(c->corrupt());
    EXPECT_FALSE(p->corrupt());
    EXPECT_EQ(expect, count);
    EXPECT_EQ(mismatches, 0u);
    Entry extra{};
    EXPECT_FALSE(c->try_pop(extra)) << "entry beyond the last one produced";
}

TEST(RingStress, two_threads_deliver_every_entry_once_in_order) {
    // Start near 2^32 so that the indices wrap during the run.
    stress<std::uint64_t>(
        64, std::numeric_limits<std::uint32_t>::max() - 1000, 2'000'000,
        [](std::uint64_t i) { return i; }, [](std::uint64_t v, std::uint64_t i) { return v == i; });
}

TEST(RingStress, two_threads_deliver_multiword_entries_untorn) {
    struct Entry {
        std::uint64_t seq;
        std::uint64_t neg;
        std::uint32_t lo;
        std::uint32_t hi;
    };
    stress<Entry>(
        32, 0, 500'000,
        [](std::uint64_t i) {
            return Entry{i, ~i, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32)};
        },
        [](const Entry& e, std::uint64_t i) {
            return e.seq == i && e.neg == ~i && e.lo == static_cast<std::uint32_t>(i) &&
                   e.hi == static_cast<std::uint32_t>(i >> 32);
        });
}

// ---- sequenced entries: the slot's seq publishes it -------------------------------------------

RecvWqe recv_wqe(std::uint64_t id, std::uint32_t num_sge = 1) {
    RecvWqe w{};
    w.wr_id = id;
    w.num_sge = num_sge;
    for (std::uint32_t i = 0; i < num_sge; ++i) w.sge[i] = {id * 100 + i, 64, 7};
    return w;
}

TEST(RingSeq, the_consumer_never_reads_the_producer_index) {
    RingPair<Cqe> r(8);
    for (std::uint64_t i = 0; i < 3; ++i) {
        Cqe c{};
        c.wr_id = i;
        ASSERT_TRUE(r.prod.try_push(c));
    }
    // Whatever the producer index says, the slots' seqs decide.
    r.mem.header().prod = 0xdead'beefu;
    Cqe out{};
    for (std::uint64_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(r.cons.try_pop(out));
        EXPECT_EQ(out.wr_id, i);
    }
    EXPECT_FALSE(r.cons.try_pop(out));
    EXPECT_FALSE(r.cons.ready());
    EXPECT_FALSE(r.cons.corrupt());
}

TEST(RingSeq, an_entry_is_not_taken_before_its_seq_is_stored) {
    RingPair<Cqe> r(4);
    std::byte* s = r.slot(0);
    // A producer half-way through its write: the body is there, the seq is not yet.
    Cqe c{};
    c.wr_id = 42;
    c.seq = 0xffff'fffdu;  // the stale tag format left (index 0 of a 4-slot ring: 1 - 4)
    std::memcpy(s, &c, sizeof c);
    Cqe out{};
    EXPECT_FALSE(r.cons.ready());
    EXPECT_FALSE(r.cons.try_pop(out));
    c.seq = 1;  // index 0's tag
    std::memcpy(s, &c, sizeof c);
    EXPECT_TRUE(r.cons.ready());
    ASSERT_TRUE(r.cons.try_pop(out));
    EXPECT_EQ(out.wr_id, 42u);
}

TEST(RingSeq, format_stamps_every_slot_so_no_left_over_byte_is_an_entry) {
    for (const std::uint32_t start : {0u, std::numeric_limits<std::uint32_t>::max() - 2}) {
        constexpr std::uint32_t kCap = 8;
        Mem mem(ring_bytes<Cqe>(kCap));
        // What an earlier ring left: every slot carrying the tag its first index would take,
        // and, for the ring that starts at 2^32 - 3, zeroes (index 2^32 - 1's tag is 0).
        auto* slots = reinterpret_cast<Cqe*>(mem.span().data() + sizeof(RingHeader));
        for (std::uint32_t i = 0; i < kCap; ++i) {
            const std::uint32_t index = start + i;
            slots[index & (kCap - 1)].seq = start == 0 ? index + 1 : 0;
        }
        auto p = RingProducer<Cqe>::init(mem.span(), kCap, start);
        auto c = RingConsumer<Cqe>::attach(mem.span());
        ASSERT_TRUE(p && c);
        Cqe out{};
        EXPECT_FALSE(c->try_pop(out)) << "start " << start;
        EXPECT_EQ(c->size(), 0u);
        // And the ring then works across the wrap of its indices.
        for (std::uint64_t round = 0; round < 3 * kCap; ++round) {
            Cqe in{};
            in.wr_id = round;
            ASSERT_TRUE(p->try_push(in));
            ASSERT_TRUE(c->try_pop(out));
            EXPECT_EQ(out.wr_id, round);
            EXPECT_FALSE(c->try_pop(out));
        }
    }
}

TEST(RingSeq, a_send_with_one_sge_moves_one_line_and_nothing_more) {
    RingPair<SendWqe> r(2);
    std::byte* s = r.slot(0);
    std::memset(s + 64, 0xab, sizeof(SendWqe) - 64);  // what an older WQE left in the slot
    SendWqe w{};
    w.wr_id = 7;
    w.num_sge = 1;
    w.sge[0] = {0x1000, 8, 3};
    std::memset(&w.sge[1], 0xcd, sizeof(SendWqe) - 64);  // garbage past the SGE in use
    ASSERT_TRUE(r.prod.try_push(w));
    // The producer wrote the first line (header and SGE); the rest of the slot is untouched.
    for (std::size_t i = 64; i < sizeof(SendWqe); ++i)
        ASSERT_EQ(s[i], std::byte{0xab}) << "byte " << i;
    SendWqe out;
    std::memset(&out, 0x11, sizeof out);
    ASSERT_TRUE(r.cons.try_pop(out));
    EXPECT_EQ(out.wr_id, 7u);
    EXPECT_EQ(out.num_sge, 1u);
    EXPECT_EQ(out.sge[0].addr, 0x1000u);
    EXPECT_EQ(out.sge[0].length, 8u);
    EXPECT_EQ(out.sge[0].lkey, 3u);
    const auto* o = reinterpret_cast<const std::byte*>(&out);
    for (std::size_t i = 64; i < sizeof(SendWqe); ++i)
        ASSERT_EQ(o[i], std::byte{0x11}) << "byte " << i << " was copied";
}

TEST(RingSeq, a_send_with_two_sges_moves_two_lines) {
    RingPair<SendWqe> r(2);
    std::byte* s = r.slot(0);
    std::memset(s + 64, 0xab, sizeof(SendWqe) - 64);
    SendWqe w{};
    w.num_sge = 2;
    w.sge[0] = {0x1000, 8, 3};
    w.sge[1] = {0x2000, 16, 4};
    ASSERT_TRUE(r.prod.try_push(w));
    EXPECT_EQ(s[80], std::byte{0xab}) << "nothing past the second SGE is written";
    SendWqe out{};
    ASSERT_TRUE(r.cons.try_pop(out));
    EXPECT_EQ(out.sge[1].addr, 0x2000u);
    EXPECT_EQ(out.sge[1].lkey, 4u);
}

TEST(RingSeq, inline_data_crosses_as_far_as_its_length) {
    RingPair<SendWqe> r(2);
    SendWqe w{};
    w.flags = snic::shm::kWqeInline;
    w.inline_length = 100;
    for (std::uint32_t i = 0; i < 100; ++i) w.inline_data[i] = static_cast<std::uint8_t>(i);
    ASSERT_TRUE(r.prod.try_push(w));
    SendWqe out;
    std::memset(&out, 0x11, sizeof out);
    ASSERT_TRUE(r.cons.try_pop(out));
    for (std::uint32_t i = 0; i < 100; ++i) ASSERT_EQ(out.inline_data[i], i);
    EXPECT_EQ(out.inline_data[100], 0x11);
}

TEST(RingSeq, a_hostile_size_is_bounded_by_the_slot) {
    // The ring's only slot ends where the memory ends: a copy past it is caught by ASan.
    RingPair<SendWqe> r(1);
    for (const auto& [flags, num_sge, inline_length] :
         {std::tuple{std::uint8_t{0}, std::uint8_t{255}, 0u},
          std::tuple{snic::shm::kWqeInline, std::uint8_t{0}, 0xffff'ffffu}}) {
        SendWqe w{};
        w.flags = flags;
        w.num_sge = num_sge;
        w.inline_length = inline_length;
        std::memcpy(r.slot(0), &w, 64);  // a client writes its slot by hand
        const std::uint32_t tag = r.cons.consumed() + 1;
        std::memcpy(r.slot(0) + offsetof(SendWqe, seq), &tag, sizeof tag);
        SendWqe out{};
        ASSERT_TRUE(r.cons.try_pop(out));
        EXPECT_EQ(out.num_sge, num_sge);
    }
}

TEST(RingSeq, staged_entries_are_ready_before_the_index_is_published) {
    RingPair<RecvWqe> r(8);
    ASSERT_TRUE(r.prod.try_stage(recv_wqe(1)));
    ASSERT_TRUE(r.prod.try_stage(recv_wqe(2)));
    EXPECT_EQ(r.mem.header().prod, 0u) << "staging stores no index";
    EXPECT_TRUE(r.cons.ready());
    EXPECT_EQ(r.cons.size(), 2u);
    EXPECT_EQ(r.cons.size(1), 1u);
    r.prod.publish();
    EXPECT_EQ(r.mem.header().prod, 2u);
    RecvWqe out{};
    ASSERT_TRUE(r.cons.try_pop(out));
    EXPECT_EQ(out.wr_id, 1u);
    EXPECT_EQ(out.sge[0].addr, 100u);
    EXPECT_EQ(r.cons.size(), 1u);
}

TEST(RingSeq, a_full_ring_refuses_until_the_consumer_frees_a_slot) {
    RingPair<RecvWqe> r(4);
    std::array<RecvWqe, 6> in{};
    for (std::uint32_t i = 0; i < in.size(); ++i) in[i] = recv_wqe(i);
    EXPECT_EQ(r.prod.push_burst(in), 4u);
    EXPECT_FALSE(r.prod.try_stage(in[4]));
    std::array<RecvWqe, 3> out{};
    ASSERT_EQ(r.cons.pop_burst(out), 3u);
    EXPECT_EQ(out[2].wr_id, 2u);
    EXPECT_EQ(r.prod.push_burst(std::span(in).subspan(4)), 2u);
    ASSERT_EQ(r.cons.pop_burst(out), 3u);
    EXPECT_EQ(out[0].wr_id, 3u);
    EXPECT_EQ(out[1].wr_id, 4u);
    EXPECT_EQ(out[2].wr_id, 5u);
}

TEST(RingStress, two_threads_deliver_sequenced_sized_entries_untorn) {
    // RecvWqe: the seq in its first line, a size from num_sge; the indices wrap in the run.
    stress<RecvWqe>(
        16, std::numeric_limits<std::uint32_t>::max() - 100, 250'000,
        [](std::uint64_t i) { return recv_wqe(i, static_cast<std::uint32_t>(i % 17)); },
        [](const RecvWqe& w, std::uint64_t i) {
            const std::uint32_t n = static_cast<std::uint32_t>(i % 17);
            if (w.wr_id != i || w.num_sge != n) return false;
            for (std::uint32_t k = 0; k < n; ++k)
                if (w.sge[k].addr != i * 100 + k || w.sge[k].length != 64) return false;
            return true;
        });
}

}  // namespace
