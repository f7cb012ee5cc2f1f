// getifaddrs() with snic's ports in it. A real RNIC's address sits on a kernel netdev, and
// consumers find RDMA devices by walking the host's interfaces and asking rdma_cm which device
// each address belongs to (libfabric's verbs provider does: without an interface it offers no
// MSG or RDM endpoint). A snic port's address is on no kernel interface (snicd owns it, the
// kernel never sees its traffic), so libsnic adds one entry per snic port to what the kernel
// lists: named after the device, up and running, with the port's IPv4 address, netmask and
// broadcast address. Nothing changes in the kernel's stack, and only processes that use libsnic
// (snic-run, or linked with it) see the entries. SNIC_IFADDRS=0 turns them off.
//
// The entries are one block per call, appended after the kernel's; freeifaddrs() releases the
// block (glibc's frees only its own), which is why both calls are wrapped.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "libclient/internal.h"
#include "libclient/util.h"

namespace snic::client {
namespace {

using GetIfaddrs = int (*)(ifaddrs**);
using FreeIfaddrs = void (*)(ifaddrs*);

struct Entry {
    ifaddrs ifa;
    sockaddr_in addr;
    sockaddr_in netmask;
    sockaddr_in broadcast;
    char name[IFNAMSIZ];
};

std::mutex blocks_mu;
std::set<const void*> blocks;  // the blocks this library handed out, not yet freed

GetIfaddrs real_getifaddrs() {
    static const auto fn = reinterpret_cast<GetIfaddrs>(dlsym(RTLD_NEXT, "getifaddrs"));
    return fn;
}

FreeIfaddrs real_freeifaddrs() {
    static const auto fn = reinterpret_cast<FreeIfaddrs>(dlsym(RTLD_NEXT, "freeifaddrs"));
    return fn;
}

bool enabled() {
    const char* v = std::getenv("SNIC_IFADDRS");
    return v == nullptr || std::strcmp(v, "0") != 0;
}

sockaddr_in ipv4(std::uint32_t host_order) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_addr.s_addr = htonl(host_order);
    return s;
}

// One entry per snic port with an address whose device name fits an interface name, linked in
// order; nullptr when there is none (or no memory: the kernel's list is still returned). A
// port is one interface, named after its RoCEv2 device, or after its iWARP device when that is
// the only one this process sees (as a netdev carries both of a kernel's soft devices).
Entry* snic_entries() {
    const std::vector<Device*> all = current_devices();
    auto roce_seen = [&](const Device& iw) {
        return std::any_of(all.begin(), all.end(), [&](const Device* d) {
            return d->transport == shm::kTransportRoce && d->port_index == iw.port_index &&
                   std::strcmp(d->socket_path, iw.socket_path) == 0;
        });
    };
    std::vector<Device*> devs;
    for (Device* d : all) {
        if (d->ipv4 == 0 || std::strlen(d->dev.name) >= IFNAMSIZ) continue;
        if (d->transport == shm::kTransportIwarp && roce_seen(*d)) continue;
        devs.push_back(d);
    }
    if (devs.empty()) return nullptr;
    auto* block = static_cast<Entry*>(std::calloc(devs.size(), sizeof(Entry)));
    if (block == nullptr) return nullptr;
    for (std::size_t i = 0; i < devs.size(); ++i) {
        const Device& d = *devs[i];
        Entry& e = block[i];
        const std::uint32_t mask = d.netmask();
        std::memcpy(e.name, d.dev.name, std::strlen(d.dev.name) + 1);  // fits: checked above
        e.addr = ipv4(d.ipv4);
        e.netmask = ipv4(mask);
        e.broadcast = ipv4(d.ipv4 | ~mask);
        e.ifa.ifa_name = e.name;
        e.ifa.ifa_flags = IFF_UP | IFF_RUNNING | IFF_BROADCAST | IFF_MULTICAST;
        e.ifa.ifa_addr = reinterpret_cast<sockaddr*>(&e.addr);
        e.ifa.ifa_netmask = reinterpret_cast<sockaddr*>(&e.netmask);
        e.ifa.ifa_broadaddr = reinterpret_cast<sockaddr*>(&e.broadcast);
        e.ifa.ifa_next = i + 1 < devs.size() ? &block[i + 1].ifa : nullptr;
    }
    return block;
}

}  // namespace
}  // namespace snic::client

using namespace snic::client;

SNIC_EXPORT int getifaddrs(ifaddrs** out) {
    const GetIfaddrs real = real_getifaddrs();
    if (real == nullptr) {
        errno = ENOSYS;
        return -1;
    }
    if (const int rc = real(out); rc != 0 || !enabled()) return rc;
    Entry* block = guarded<Entry*>(nullptr, [] { return snic_entries(); });
    if (block == nullptr) return 0;
    {
        std::lock_guard lock(blocks_mu);
        blocks.insert(block);
    }
    ifaddrs** tail = out;
    while (*tail != nullptr) tail = &(*tail)->ifa_next;
    *tail = &block->ifa;
    return 0;
}

SNIC_EXPORT void freeifaddrs(ifaddrs* list) {
    // Cut the list at the first block of ours; the part before it is the kernel's.
    ifaddrs* head = list;
    for (ifaddrs** link = &head; *link != nullptr; link = &(*link)->ifa_next) {
        std::unique_lock lock(blocks_mu);
        if (auto it = blocks.find(*link); it != blocks.end()) {
            blocks.erase(it);
            lock.unlock();
            std::free(*link);
            *link = nullptr;
            break;
        }
    }
    if (head != nullptr)
        if (const FreeIfaddrs real = real_freeifaddrs(); real != nullptr) real(head);
}
