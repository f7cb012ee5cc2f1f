#include "daemon/port/xdp_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

namespace snic::daemon {
namespace {

Error bpf_error(int err, const std::string& what) {
    return make_error(err, what + ": " + std::strerror(err));
}

}  // namespace

Result<int> claim_interface(int ifindex, const std::string& name) {
    // The claim: a lock named after the network namespace and the interface, held while the
    // port runs; the kernel lets it go when its snicd ends, however it ends.
    struct stat ns {};
    if (::stat("/proc/self/ns/net", &ns) != 0)
        return bpf_error(errno, "cannot tell this network namespace");
    ::mkdir("/run/snic", 0755);
    const std::string path =
        "/run/snic/shared-" + std::to_string(ns.st_ino) + "-" + std::to_string(ifindex) + ".lock";
    const int lock = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock < 0) return bpf_error(errno, "cannot open " + path);
    if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        ::close(lock);
        return make_error(e == EWOULDBLOCK ? EBUSY : e,
                          name + " is shared by another snicd already (" + path + " is locked)");
    }
    __u32 id = 0;
    if (const int err = bpf_xdp_query_id(ifindex, 0, &id); err != 0) {
        ::close(lock);
        return bpf_error(-err, "cannot ask which XDP program " + name + " runs");
    }
    if (id == 0) return lock;
    const int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) {
        const int e = errno;
        ::close(lock);
        return bpf_error(e, "cannot open the XDP program on " + name);
    }
    auto maps = XdpMaps::of_program(fd);
    ::close(fd);
    if (!maps) {
        ::close(lock);
        return make_error(EBUSY, name + " runs an XDP program that is not snicd's (" +
                                     maps.error().message + "); detach it (ip link set " + name +
                                     " xdp off) or share another interface");
    }
    // snicd's, and no snicd holds the interface: one that died left it.
    if (const int err = bpf_xdp_detach(ifindex, 0, nullptr); err != 0) {
        ::close(lock);
        return bpf_error(-err, "cannot detach the XDP program a snicd that died left on " + name);
    }
    spdlog::warn("{}: detached the XDP program (id {}) a snicd that died left on it", name, id);
    return lock;
}

std::string xdp_program_path() {
    return ::access(SNIC_XDP_BUILD_PATH, R_OK) == 0 ? SNIC_XDP_BUILD_PATH : SNIC_XDP_INSTALL_PATH;
}

XdpMaps::MapFd& XdpMaps::MapFd::operator=(MapFd&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
}

XdpMaps::MapFd::~MapFd() {
    if (fd_ >= 0) ::close(fd_);
}

Result<XdpMaps> XdpMaps::of_interface(int ifindex) {
    __u32 id = 0;
    if (const int err = bpf_xdp_query_id(ifindex, 0, &id); err != 0)
        return bpf_error(
            -err, "cannot ask which XDP program interface " + std::to_string(ifindex) + " runs");
    if (id == 0)
        return make_error(ENOENT, "interface " + std::to_string(ifindex) + " runs no XDP program");
    const int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) return bpf_error(errno, "cannot open XDP program " + std::to_string(id));
    MapFd prog(fd);
    return of_program(prog.get());
}

Result<XdpMaps> XdpMaps::of_program(int prog_fd) {
    bpf_prog_info info{};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
        return bpf_error(errno, "cannot read the XDP program's information");
    std::vector<__u32> ids(info.nr_map_ids);
    info = bpf_prog_info{};
    info.nr_map_ids = static_cast<__u32>(ids.size());
    info.map_ids = reinterpret_cast<__u64>(ids.data());
    len = sizeof info;
    if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
        return bpf_error(errno, "cannot read the XDP program's maps");
    XdpMaps m;
    for (std::size_t i = 0; i < ids.size() && i < info.nr_map_ids; ++i) {
        MapFd fd(bpf_map_get_fd_by_id(ids[i]));
        if (fd.get() < 0) return bpf_error(errno, "cannot open an XDP map");
        bpf_map_info mi{};
        __u32 mlen = sizeof mi;
        if (bpf_obj_get_info_by_fd(fd.get(), &mi, &mlen) != 0)
            return bpf_error(errno, "cannot read an XDP map's information");
        const std::string_view name(mi.name);
        if (name == "snic_xdp_addr")
            m.addr_ = std::move(fd);
        else if (name == "snic_tcp_ports")
            m.tcp_ports_ = std::move(fd);
        else if (name == "snic_xdp_counts")
            m.counts_ = std::move(fd);
    }
    if (m.addr_.get() < 0 || m.tcp_ports_.get() < 0 || m.counts_.get() < 0)
        return make_error(EINVAL, std::string("the XDP program '") + info.name +
                                      "' is not snicd's (no snic_xdp_addr, snic_tcp_ports or "
                                      "snic_xdp_counts map)");
    return m;
}

Status XdpMaps::set_address(std::uint32_t ip) {
    const __u32 key = 0;
    const __u32 value = htonl(ip);
    if (bpf_map_update_elem(addr_.get(), &key, &value, BPF_ANY) != 0)
        return bpf_error(errno, "cannot set the XDP program's address");
    return Ok{};
}

Status XdpMaps::hold_tcp_port(std::uint16_t port, bool held) {
    const __u32 key = port;
    const __u8 value = held ? 1 : 0;
    if (bpf_map_update_elem(tcp_ports_.get(), &key, &value, BPF_ANY) != 0)
        return bpf_error(errno, "cannot update the XDP program's TCP ports");
    return Ok{};
}

Result<XdpCounts> XdpMaps::counts() const {
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return bpf_error(-cpus, "cannot count the CPUs");
    std::vector<__u64> per_cpu(static_cast<std::size_t>(cpus));
    std::array<std::uint64_t, 4> sum{};
    for (__u32 k = 0; k < sum.size(); ++k) {
        if (bpf_map_lookup_elem(counts_.get(), &k, per_cpu.data()) != 0)
            return bpf_error(errno, "cannot read the XDP program's counters");
        for (const __u64 v : per_cpu) sum[k] += v;
    }
    return XdpCounts{sum[0], sum[1], sum[2], sum[3]};
}

}  // namespace snic::daemon
