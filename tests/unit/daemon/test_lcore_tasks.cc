// Work the control thread hands to a data lcore (daemon/lcore/lcore_tasks.h): it runs on the lcore,
// once, and run() returns only after it ran, with its effects visible to the caller; tasks
// handed over while the lcore's loop ends still run once, on the lcore or on the caller. Two
// threads play the two roles; the TSan build of these tests checks the handshake itself.
#include "daemon/lcore/lcore_tasks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace snic::daemon {
namespace {

// Plays a data lcore: polls its tasks until told to stop, then ends its loop as Lcore::run
// does.
class LcoreThread {
  public:
    explicit LcoreThread(LcoreTasks& tasks)
        : thread_([this, &tasks] {
              id_ = std::this_thread::get_id();
              started_.store(true, std::memory_order_release);
              while (!stop_.load(std::memory_order_relaxed)) {
                  if (tasks.poll() == 0) std::this_thread::yield();
              }
              tasks.stop();
          }) {
        while (!started_.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    ~LcoreThread() { join(); }

    std::thread::id id() const { return id_; }
    void join() {
        stop_.store(true, std::memory_order_relaxed);
        if (thread_.joinable()) thread_.join();
    }

  private:
    std::thread::id id_;
    std::atomic<bool> started_{false};
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

TEST(LcoreTasks, a_task_runs_on_the_lcore_and_its_effects_are_seen_when_run_returns) {
    LcoreTasks tasks;
    LcoreThread lcore(tasks);
    // Plain memory, written on the lcore and read here: run()'s return orders the two.
    std::vector<std::thread::id> ran_on;
    int sum = 0;
    for (int i = 1; i <= 200; ++i) {
        tasks.run([&, i] {
            ran_on.push_back(std::this_thread::get_id());
            sum += i;
        });
        ASSERT_EQ(ran_on.size(), static_cast<std::size_t>(i));
    }
    EXPECT_EQ(sum, 200 * 201 / 2);
    for (const auto& id : ran_on) EXPECT_EQ(id, lcore.id());
}

TEST(LcoreTasks, after_the_loop_ended_tasks_run_on_the_caller) {
    LcoreTasks tasks;
    LcoreThread lcore(tasks);
    lcore.join();
    std::thread::id ran_on;
    tasks.run([&] { ran_on = std::this_thread::get_id(); });
    EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(LcoreTasks, a_task_handed_over_as_the_loop_ends_runs_once) {
    // The control thread keeps handing tasks over while the lcore stops: each one runs once
    // (on the lcore before its last poll, or on the caller after), and every run() returns.
    for (int round = 0; round < 50; ++round) {
        LcoreTasks tasks;
        std::atomic<bool> lcore_stopping{false};
        int runs = 0;
        std::thread control([&] {
            for (int i = 0; i < 100; ++i) {
                tasks.run([&runs] { ++runs; });
                if (i == 10) lcore_stopping.store(true, std::memory_order_relaxed);
            }
        });
        {
            LcoreThread lcore(tasks);
            while (!lcore_stopping.load(std::memory_order_relaxed)) std::this_thread::yield();
        }  // joins: the loop ends while the control thread is still handing tasks over
        control.join();
        ASSERT_EQ(runs, 100) << "round " << round;
    }
}

}  // namespace
}  // namespace snic::daemon
