// The lane of each client process on an iWARP device of several lanes (daemon/verbs/device.h).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "daemon/verbs/device.h"

namespace snic::daemon {
namespace {

// The pid of a child that has exited and been reaped: a process found gone.
std::int32_t gone_pid() {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    int status = 0;
    ::waitpid(child, &status, 0);
    return child;
}

TEST(ProcessLanes, processes_with_sessions_go_to_the_lane_with_fewest) {
    ProcessLanes lanes(2);
    const std::int32_t a = ::getpid(), b = ::getppid();
    EXPECT_EQ(lanes.join(a), 0u);
    EXPECT_EQ(lanes.join(b), 1u);
    EXPECT_EQ(lanes.join(a), 0u);  // a second session of a: its lane, whatever the counts
    EXPECT_EQ(lanes.processes(), (std::vector<std::uint32_t>{1, 1}));
}

TEST(ProcessLanes, the_cm_and_the_sessions_agree_on_a_process_lane) {
    ProcessLanes lanes(2);
    const std::int32_t a = ::getpid(), b = ::getppid();
    EXPECT_EQ(lanes.join(a), 0u);
    EXPECT_EQ(lanes.lane_of(b), 1u);  // the CM first (a connect before any session of b)
    EXPECT_EQ(lanes.join(b), 1u);     // then its session: the same lane
    EXPECT_EQ(lanes.lane_of(a), 0u);
}

TEST(ProcessLanes, a_process_that_only_listens_weighs_nothing) {
    ProcessLanes lanes(2);
    const std::int32_t listener = ::getppid(), a = ::getpid();
    EXPECT_EQ(lanes.lane_of(listener), 0u);  // a listener on every device: no session here
    EXPECT_EQ(lanes.processes(), (std::vector<std::uint32_t>{0, 0}));
    EXPECT_EQ(lanes.join(a), 0u);
}

TEST(ProcessLanes, a_process_keeps_its_lane_until_it_is_gone) {
    ProcessLanes lanes(2);
    const std::int32_t a = ::getpid();
    EXPECT_EQ(lanes.join(a), 0u);
    lanes.leave(a);
    EXPECT_EQ(lanes.processes(), (std::vector<std::uint32_t>{0, 0}));
    EXPECT_EQ(lanes.lane_of(::getppid()), 0u);
    EXPECT_EQ(lanes.join(::getppid()), 0u);
    EXPECT_EQ(lanes.join(a), 0u);  // alive: its lane still, though it had no session open
    EXPECT_EQ(lanes.known(), 2u);

    const std::int32_t dead = gone_pid();
    lanes.lane_of(dead);
    EXPECT_EQ(lanes.known(), 3u);
    const std::int32_t next = gone_pid();  // a new process forgets the gone ones
    lanes.lane_of(next);
    EXPECT_EQ(lanes.known(), 3u);  // `dead` forgotten, `next` known
}

TEST(ProcessLanes, leaving_more_than_joined_changes_nothing) {
    ProcessLanes lanes(2);
    lanes.leave(::getpid());
    EXPECT_EQ(lanes.join(::getpid()), 0u);
    lanes.leave(::getpid());
    lanes.leave(::getpid());
    EXPECT_EQ(lanes.processes(), (std::vector<std::uint32_t>{0, 0}));
}

}  // namespace
}  // namespace snic::daemon
