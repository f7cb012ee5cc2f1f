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

namespace place_detail {

// Keeps the compiler from merging or reordering the stores around it: x86 makes stores
// visible in program order, and this keeps program order the order written.
inline void in_order() {
    asm volatile("" ::: "memory");
}

// An unaligned T, read and written with one access (memcpy might become a library call,
// whose store of 8 bytes is two overlapping ones).
template <typename T>
struct [[gnu::packed, gnu::may_alias]] Unaligned {
    T v;
};

// One store of sizeof(T) bytes.
template <typename T>
inline void put(std::uint8_t*& d, const std::uint8_t*& s) {
    reinterpret_cast<Unaligned<T>*>(d)->v = reinterpret_cast<const Unaligned<T>*>(s)->v;
    d += sizeof(T);
    s += sizeof(T);
    in_order();
}

// Under 16 bytes, widest piece first.
inline void under_16(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
    if ((n & 8) != 0) put<std::uint64_t>(d, s);
    if ((n & 4) != 0) put<std::uint32_t>(d, s);
    if ((n & 2) != 0) put<std::uint16_t>(d, s);
    if ((n & 1) != 0) put<std::uint8_t>(d, s);
}

// 16 bytes or more, by the widest vectors this CPU has.
void vectors(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) noexcept;

}  // namespace place_detail

// Copies n bytes from src to dst (which do not overlap): each destination byte stored once,
// the stores in ascending address order. Vector stores where the CPU has them; a copy under
// 16 bytes (a flag, a credit, a small message) is made here, without a call.
inline void place(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) noexcept {
    if (n < 16)
        place_detail::under_16(dst, src, n);
    else
        place_detail::vectors(dst, src, n);
}

// The implementations this CPU can run, the one place() uses first: for the tests.
struct PlaceVariant {
    const char* name;
    void (*fn)(std::uint8_t* dst, const std::uint8_t* src, std::size_t n);
};
std::span<const PlaceVariant> place_variants() noexcept;

}  // namespace snic::verbs
