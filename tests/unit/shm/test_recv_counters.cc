// A QP's receive counters (shm/wqe.h QpRecvCounters): snicd publishes (taken, completed) with a
// seqlock and a reader gets a pair that was published, never one mixed from two, whatever the
// writer does meanwhile.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "shm/wqe.h"

namespace snic::shm {
namespace {

TEST(RecvCounters, a_published_pair_is_read_back) {
    QpRecvCounters c{};
    std::uint32_t seq = 0;
    std::uint64_t taken = 9, completed = 9;
    ASSERT_TRUE(read_recv_counters(c, taken, completed));
    EXPECT_EQ(taken, 0u);
    EXPECT_EQ(completed, 0u);
    publish_recv_counters(c, seq, 5, 4);
    ASSERT_TRUE(read_recv_counters(c, taken, completed));
    EXPECT_EQ(taken, 5u);
    EXPECT_EQ(completed, 4u);
    EXPECT_EQ(seq % 2, 0u);
}

TEST(RecvCounters, a_pair_being_written_is_not_read) {
    QpRecvCounters c{};
    c.seq = 3;  // a writer in the middle of a pair
    std::uint64_t taken = 0, completed = 0;
    EXPECT_FALSE(read_recv_counters(c, taken, completed));
}

// The writer alternates a take (taken + 1) and a completion (completed + 1); every pair a
// reader gets is one of them: taken - completed is 0 or 1 and neither goes backwards.
TEST(RecvCounters, a_reader_racing_the_writer_sees_only_published_pairs) {
    QpRecvCounters c{};
    constexpr std::uint64_t kMessages = 200000;
    std::atomic<bool> done{false};
    std::thread writer([&] {
        std::uint32_t seq = 0;
        for (std::uint64_t n = 1; n <= kMessages; ++n) {
            publish_recv_counters(c, seq, n, n - 1);
            publish_recv_counters(c, seq, n, n);
        }
        done.store(true, std::memory_order_release);
    });
    std::uint64_t last_taken = 0, last_completed = 0, reads = 0;
    bool finished = false;
    while (!finished) {
        finished = done.load(std::memory_order_acquire);
        std::uint64_t taken = 0, completed = 0;
        if (!read_recv_counters(c, taken, completed)) continue;
        ++reads;
        ASSERT_LE(completed, taken);
        ASSERT_LE(taken - completed, 1u);
        ASSERT_GE(taken, last_taken);
        ASSERT_GE(completed, last_completed);
        last_taken = taken;
        last_completed = completed;
    }
    writer.join();
    EXPECT_EQ(last_taken, kMessages);
    EXPECT_EQ(last_completed, kMessages);
    EXPECT_GT(reads, 0u);
}

}  // namespace
}  // namespace snic::shm
