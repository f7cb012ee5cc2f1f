#include "daemon/port/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <rte_pdump.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

namespace snic::daemon {

namespace {

// DPDK writes its log through a FILE*; this one hands complete lines to spdlog
// and remembers the last error, for the one-line report of a failed start.
struct LogSink {
    static constexpr std::size_t kMaxErrors = 3;
    std::string line;
    std::vector<std::string> errors;  // the first error lines since eal_init() began
    std::shared_ptr<spdlog::logger> logger;
};
LogSink g_sink;

spdlog::level::level_enum level_of(std::uint32_t rte_level) {
    if (rte_level <= RTE_LOG_ERR) return spdlog::level::err;
    if (rte_level == RTE_LOG_WARNING) return spdlog::level::warn;
    if (rte_level == RTE_LOG_NOTICE) return spdlog::level::info;
    if (rte_level == RTE_LOG_INFO) return spdlog::level::debug;
    return spdlog::level::trace;
}

ssize_t sink_write(void*, const char* buf, size_t size) {
    const int level = rte_log_cur_msg_loglevel();
    for (size_t i = 0; i < size; ++i) {
        if (buf[i] != '\n') {
            g_sink.line += buf[i];
            continue;
        }
        const auto lvl = level_of(level < 0 ? RTE_LOG_INFO : static_cast<std::uint32_t>(level));
        if (lvl >= spdlog::level::err && g_sink.errors.size() < LogSink::kMaxErrors)
            g_sink.errors.push_back(g_sink.line);
        g_sink.logger->log(lvl, "{}", g_sink.line);
        g_sink.line.clear();
    }
    return static_cast<ssize_t>(size);
}

// Runs f with the process's stderr captured: EAL prints fatal alerts there
// directly, and snicd's contract is one error line of its own.
template <typename F>
std::string with_stderr_captured(F&& f) {
    std::fflush(stderr);
    const int saved = ::dup(STDERR_FILENO);
    const int mem = ::memfd_create("snicd-eal-stderr", MFD_CLOEXEC);
    if (saved < 0 || mem < 0) {
        if (saved >= 0) ::close(saved);
        if (mem >= 0) ::close(mem);
        f();
        return {};
    }
    ::dup2(mem, STDERR_FILENO);
    f();
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    std::string out;
    char buf[4096];
    ssize_t n;
    ::lseek(mem, 0, SEEK_SET);
    while ((n = ::read(mem, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    ::close(mem);
    return out;
}

}  // namespace

SplitArgs split_args(int argc, char** argv) {
    SplitArgs out;
    out.eal.push_back(argc > 0 ? argv[0] : "snicd");
    int dashes = -1;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) {
            dashes = i;
            break;
        }
    }
    if (dashes < 0) {
        for (int i = 1; i < argc; ++i) out.app.emplace_back(argv[i]);
        return out;
    }
    for (int i = 1; i < dashes; ++i) out.eal.emplace_back(argv[i]);
    for (int i = dashes + 1; i < argc; ++i) out.app.emplace_back(argv[i]);
    return out;
}

void add_default_file_prefix(std::vector<std::string>& eal, std::string_view name) {
    for (const auto& a : eal) {
        if (a == "--in-memory" || a.starts_with("--file-prefix")) return;
    }
    eal.emplace_back("--file-prefix=snic-" + std::string(name));
}

void add_sanitizer_base_virtaddr([[maybe_unused]] std::vector<std::string>& eal) {
#if defined(__SANITIZE_ADDRESS__)  // gcc's -fsanitize=address (clang: __has_feature)
    constexpr bool asan = true;
#elif defined(__has_feature)
    constexpr bool asan = __has_feature(address_sanitizer);
#else
    constexpr bool asan = false;
#endif
    if constexpr (asan) {
        for (const auto& a : eal)
            if (a.starts_with("--base-virtaddr")) return;
        eal.emplace_back("--base-virtaddr=" + std::string(kAsanBaseVirtaddr));
    }
}

void route_dpdk_log() {
    g_sink.logger = spdlog::default_logger()->clone("dpdk");
    cookie_io_functions_t io{};
    io.write = sink_write;
    FILE* f = fopencookie(nullptr, "w", io);
    if (f == nullptr) return;
    setvbuf(f, nullptr, _IOLBF, 0);
    rte_openlog_stream(f);
}

Status eal_init(const std::vector<std::string>& eal) {
    std::vector<std::string> copy = eal;  // rte_eal_init may permute its argv
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = 0;
    g_sink.errors.clear();
    const std::string alert = with_stderr_captured(
        [&] { rc = rte_eal_init(static_cast<int>(copy.size()), argv.data()); });
    for (std::size_t pos = 0; pos < alert.size();) {  // keep whatever EAL printed
        const std::size_t nl = alert.find('\n', pos);
        g_sink.logger->info("{}", alert.substr(pos, nl - pos));
        pos = nl == std::string::npos ? alert.size() : nl + 1;
    }
    if (rc >= 0) {
        // Lets dpdk-dumpcap (a secondary process) capture the ports of a running daemon;
        // without a shared configuration (--in-memory, --no-shconf) there is nothing to attach to.
        if (rte_pdump_init() != 0)
            spdlog::info("packet capture (dpdk-dumpcap) unavailable: {}", rte_strerror(rte_errno));
        return Ok{};
    }

    // Prefer DPDK's own words: its error lines, else its fatal alert.
    std::string why = eal_errors();
    if (why.empty()) why = alert.substr(0, alert.find('\n'));
    if (why.empty()) why = rte_strerror(rte_errno);
    return make_error(rte_errno, "DPDK initialisation failed: " + why);
}

std::string eal_errors() {
    std::string out;
    for (const auto& e : g_sink.errors) out += (out.empty() ? "" : "; ") + e;
    return out;
}

}  // namespace snic::daemon
