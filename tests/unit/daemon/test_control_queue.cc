// Questions to the control thread (daemon/control/control_queue.h): answered there, and an asker
// that waits too long, or asks a thread that stopped serving, gets nothing without harm.
#include "daemon/control/control_queue.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace snic::daemon {
namespace {

using namespace std::chrono_literals;

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

// Plays the control thread: answers whatever is asked until told to stop.
class Answerer {
  public:
    explicit Answerer(ControlQueue& q)
        : thread_([this, &q] {
              while (!stop_.load()) {
                  pollfd p{q.fd(), POLLIN, 0};
                  if (::poll(&p, 1, 10) == 1) q.answer_all();
              }
          }) {}
    ~Answerer() {
        stop_.store(true);
        thread_.join();
    }

  private:
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

TEST(ControlQueue, a_question_runs_on_the_answering_thread) {
    ControlQueue q;
    std::thread::id asker = std::this_thread::get_id();
    std::thread::id ran_on;
    std::optional<int> answer;
    {
        Answerer a(q);
        answer = q.ask<int>(
            [&] {
                ran_on = std::this_thread::get_id();
                return 42;
            },
            10s);
    }
    EXPECT_EQ(answer, 42);
    EXPECT_NE(ran_on, asker);
}

TEST(ControlQueue, the_queue_is_readable_while_a_question_waits) {
    ControlQueue q;
    EXPECT_FALSE(readable(q.fd()));
    EXPECT_EQ(q.ask<int>([] { return 1; }, 1ms), std::nullopt) << "nobody answers";
    EXPECT_TRUE(readable(q.fd()));
    q.answer_all();  // the late answer is dropped, harmlessly
    EXPECT_FALSE(readable(q.fd()));
}

TEST(ControlQueue, a_late_answer_finds_the_asker_gone) {
    ControlQueue q;
    int runs = 0;
    EXPECT_EQ(q.ask<int>(
                  [&runs] {
                      ++runs;
                      return 1;
                  },
                  1ms),
              std::nullopt);
    q.answer_all();
    EXPECT_EQ(runs, 1);
}

TEST(ControlQueue, closing_wakes_the_askers_and_refuses_new_questions) {
    ControlQueue q;
    std::optional<int> answer = 0;
    const auto start = std::chrono::steady_clock::now();
    std::thread asker([&] { answer = q.ask<int>([] { return 7; }, 30s); });
    while (!readable(q.fd())) std::this_thread::yield();  // the question is queued
    q.close();
    asker.join();
    EXPECT_EQ(answer, std::nullopt);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "woken by close(), not the bound";
    EXPECT_EQ(q.ask<int>([] { return 7; }, 30s), std::nullopt);
}

TEST(ControlQueue, a_question_that_throws_gets_no_answer) {
    ControlQueue q;
    Answerer a(q);
    EXPECT_EQ(q.ask<int>([]() -> int { throw std::runtime_error("no"); }, 10s), std::nullopt);
    EXPECT_EQ(q.ask<int>([] { return 3; }, 10s), 3) << "and the next one is answered";
}

}  // namespace
}  // namespace snic::daemon
