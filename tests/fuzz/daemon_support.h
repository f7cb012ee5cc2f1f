// What the two targets over the daemon's control path (control_ops, control_socket) share:
// the process's open descriptors counted, memfds made as libsnic makes them, and one fake
// port to open a device on.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "daemon/roce/roce_rules.h"
#include "daemon/verbs/session.h"
#include "tests/fuzz/fuzz_support.h"

namespace snic::fuzz {

// Descriptors open in this process now (/proc/self/fd, its own directory handle included).
inline std::size_t open_fds() {
    std::size_t n = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (::readdir(d) != nullptr) ++n;
        ::closedir(d);
    }
    return n;
}

// A memfd as libsnic makes it, sealed against shrinking; `fmt` formats rings in it.
inline int memfd(std::size_t bytes, const std::function<void(std::span<std::byte>)>& fmt = {}) {
    const int fd = ::memfd_create("snic-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    SNIC_FUZZ_REQUIRE(fd >= 0);
    SNIC_FUZZ_REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
    if (fmt && bytes != 0) {
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        SNIC_FUZZ_REQUIRE(p != MAP_FAILED);
        fmt({static_cast<std::byte*>(p), bytes});
        ::munmap(p, bytes);
    }
    return fd;
}

// One port, up, with no datapath behind it.
inline std::vector<daemon::DevicePort> fake_ports() {
    daemon::DevicePort p{net::MacAddr{{0x02, 0, 0, 0, 0, 1}}, {{0xc6120001}, 24}, 1500, [] {
                             return daemon::LinkInfo{true, 10000};
                         }};
    p.devices[shm::kTransportRoce] = {"snic_0", &daemon::roce_rules(), nullptr, {}, {}, {}};
    return {p};
}

}  // namespace snic::fuzz
