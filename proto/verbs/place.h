// The write of received bytes into an application's registered memory, as a NIC's DMA
// makes it: every destination byte stored exactly once, in ascending address order.
//
// memcpy promises neither. glibc's copies of 8 to 64 bytes store the head and the tail with
// two overlapping stores (16 bytes are written twice), and larger copies store their tail
// before their body. Applications of RDMA count on the NIC's behaviour, and these two
// differences are visible to a CPU that reads and writes the memory while it lands:
//   - A credit or mailbox slot the peer writes and the owner then updates in place
//     (rsockets' target SGL: the owner advances the remote write address it was just given)
//     loses that update when the second, identical store of the same bytes lands after it.
//     This is how rstream over iWARP saw its stream shifted by 16 bytes.
//   - A poller of a buffer's last byte (ib_write_lat's, and many MPI eager protocols') may
//     see it before the bytes before it are there.
// The receive paths of both transports place through this, or through CRC-32 and CRC-32C's
// update_copy, which stores each byte it folds once, in ascending order, as well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace snic::verbs {

// Copies n bytes from src to dst (which do not overlap): each destination byte stored once,
// the stores in ascending address order. Vector stores where the CPU has them.
void place(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) noexcept;

// The implementations this CPU can run, the one place() uses first: for the tests.
struct PlaceVariant {
    const char* name;
    void (*fn)(std::uint8_t* dst, const std::uint8_t* src, std::size_t n);
};
std::span<const PlaceVariant> place_variants() noexcept;

}  // namespace snic::verbs
