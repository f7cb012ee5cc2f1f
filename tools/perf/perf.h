// snic-perf's shared pieces: the program name, the run-time failure (exit 1) and its
// helpers, the clock and the signaling interval used by the ends and the runs.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace snic::perf {

using Clock = std::chrono::steady_clock;
inline constexpr const char* kProg = "snic-perf";
inline constexpr std::uint32_t kSignalEvery = 32;

// A failure at run time: reported in one line, exit 1.
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void failf(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw Failure(buf);
}

inline void check(int rc, const char* what) {
    if (rc != 0) failf("%s: %s", what, std::strerror(rc > 0 ? rc : errno));
}

}  // namespace snic::perf
