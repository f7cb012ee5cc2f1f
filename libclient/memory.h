// Making application memory shared with snicd (docs/LIBSNIC.md, "Memory
// registration"): a process-wide registry of the memfds that back memory
// libsnic has already shared, the in-place move of private anonymous
// pages into a new memfd, so that the application keeps its pointers, and the
// application's own shared memory (SysV segments, memfds) named to snicd as it is. At fork,
// the child gets private copies of the memory libsnic moved (registered, or released since),
// as Linux copies pinned pages for a child since 5.12 (rdma-core's IBV_FORK_UNNEEDED): the
// handler is installed when libsnic is loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shm/control_abi.h"

namespace snic::client {

// One memfd that backs [addr, addr+len) of this process, from memfd offset file_offset:
// libsnic's own (offset 0, kept in the registry for later registrations) or an
// application's memfd (held for one registration only).
struct Share {
    std::uintptr_t addr;
    std::size_t len;
    std::uint64_t file_offset = 0;
    int fd;                    // owned: closed with the Share
    std::uint64_t ino;         // the memfd's inode, to recognise its mappings in /proc/self/maps
    std::uint32_t refs;        // memory regions using it (under the registry's lock)
    std::uint64_t idle_since;  // release order, for evicting idle shares
    ~Share();
};

// The memory of one registration, as segments of memfds and of SysV segments.
struct SharedRange {
    std::vector<shm::MrSegment> segs;
    std::vector<int> fds;                        // one per memfd segment (borrowed from the shares)
    std::vector<std::shared_ptr<Share>> shares;  // referenced, one per memfd segment
};

// Makes the pages that hold [addr, addr+len) shared: reuses shares that
// already back some of them and moves the others into new memfds. On failure
// returns EINVAL (after one line on stderr naming the range and why) or
// another errno, and changes no reference count.
int share_range(std::uintptr_t addr, std::size_t len, SharedRange* out);

// Drops the references share_range took.
void unshare(std::vector<std::shared_ptr<Share>>& shares);

}  // namespace snic::client
