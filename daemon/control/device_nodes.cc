#include "daemon/control/device_nodes.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "shm/control_abi.h"

namespace snic::daemon {

namespace {

// /dev/null's numbers (1:3 on Linux, read from /dev/null when it is there).
dev_t null_device() {
    struct stat st {};
    if (::stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)) return st.st_rdev;
    return makedev(1, 3);
}

}  // namespace

bool is_snic_node(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == null_device();
}

DeviceNodes::DeviceNodes(std::string dir, std::span<const std::string> names, mode_t mode) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        spdlog::warn("device nodes: cannot make {}: {}", dir, std::strerror(errno));
        return;
    }
    for (const std::string& name : names) {
        const std::string path = dir + "/" + shm::kDeviceNodePrefix + name;
        if (::mknod(path.c_str(), S_IFCHR | (mode & 0777), null_device()) != 0 && errno != EEXIST) {
            spdlog::warn("device nodes: cannot make {}: {}", path, std::strerror(errno));
            continue;
        }
        if (!is_snic_node(path)) {
            spdlog::warn("device nodes: {} exists and is not snic's: left alone", path);
            continue;
        }
        // mknod applies the umask, and a kept node may have another mode or owner.
        if (::chown(path.c_str(), ::geteuid(), ::getegid()) != 0 ||
            ::chmod(path.c_str(), mode & 0777) != 0)
            spdlog::warn("device nodes: cannot set the owner and mode of {}: {}", path,
                         std::strerror(errno));
        made_.push_back(path);
    }
    if (!made_.empty())
        spdlog::info("device nodes: {} in {} (for verbs consumers that look for them)",
                     made_.size(), dir);
}

DeviceNodes::~DeviceNodes() {
    for (const std::string& path : made_)
        if (is_snic_node(path) && ::unlink(path.c_str()) != 0)
            spdlog::warn("device nodes: cannot remove {}: {}", path, std::strerror(errno));
}

}  // namespace snic::daemon
