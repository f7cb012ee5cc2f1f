// What snic's command-line tools share: a usage error reported in one line (exit 2), and
// a decimal number checked against its range.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace snic::cli {

inline constexpr int kExitUsage = 2;

[[noreturn]] inline void usage_error(const char* prog, const std::string& why) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", prog, why.c_str(), prog);
    std::exit(kExitUsage);
}

// `s` as a number in [lo, hi], or a usage error naming `what`.
inline std::uint64_t number(const char* prog, const char* s, const char* what, std::uint64_t lo,
                            std::uint64_t hi) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi)
        usage_error(prog, std::string("invalid ") + what + " '" + s + "' (" + std::to_string(lo) +
                              ".." + std::to_string(hi) + ")");
    return v;
}

}  // namespace snic::cli
