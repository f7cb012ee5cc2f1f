// Client memory that can fault under snicd. A hugetlb page the client punched out of its
// registered memory comes back on snicd's next access only if the huge page pool has one to
// spare; if not, that access (a CQE write, a placement on an lcore) gets SIGBUS, and SIGBUS
// would end the daemon and every other client's work with it. The fault is the client's
// doing, so snicd survives it: the ranges that may fault are registered here, and the SIGBUS
// handler maps private zero-filled memory over the faulting page (at the range's page size),
// counts the fault and marks the range damaged; the access then goes on, into memory nobody
// else sees (the client lost what it punched out, as it asked). A fault outside every range
// is snicd's own: the previous action (the default, a core) applies.
//
// add() and remove() are for the control thread (any thread, serialised by a mutex); the
// handler reads the table without locks: a slot is published by its start address (release),
// retired by clearing it before the memory is unmapped.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snic::daemon::fault_guard {

inline constexpr std::uint32_t kNoSlot = ~0u;

// Installs the SIGBUS handler (once; later calls do nothing). False if sigaction failed.
bool install();

// Registers [addr, addr + bytes), mapped in pages of `page` bytes (a power of two, addr and
// bytes multiples of it). kNoSlot when the table is full: the range is then unguarded.
std::uint32_t add(void* addr, std::size_t bytes, std::size_t page);

// Retires a slot (before its memory is unmapped). Returns the faults recovered in it.
std::uint32_t remove(std::uint32_t slot);

// The faults recovered since start, in every range.
std::uint64_t recovered();

}  // namespace snic::daemon::fault_guard
