// The extension transport headers that follow the BTH (IBA vol 1 §9.3): RETH, AETH,
// AtomicETH, AtomicAckETH, ImmDt, IETH and DETH, and the AETH syndrome's encoding
// (§9.3, AETH). Which of them an opcode carries, and where, is in opcode.h's table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/net/byteorder.h"
#include "proto/roce/bth.h"

namespace snic::roce {

// RDMA Extended Transport Header, 16 bytes: RDMA WRITE First/Only and READ Request.
struct Reth {
    net::Be64 va;       // remote virtual address
    net::Be32 rkey;     // R_Key
    net::Be32 dma_len;  // length of the whole RDMA operation, bytes
};
static_assert(sizeof(Reth) == 16 && alignof(Reth) == 1);

// ACK Extended Transport Header, 4 bytes: ACKs, NAKs and READ responses First/Last/Only.
struct Aeth {
    std::uint8_t syndrome;  // see AckType, NakCode below
    Be24 msn;               // message sequence number
};
static_assert(sizeof(Aeth) == 4 && alignof(Aeth) == 1);

// Atomic Extended Transport Header, 28 bytes: CmpSwap and FetchAdd.
struct AtomicEth {
    net::Be64 va;
    net::Be32 rkey;
    net::Be64 swap_add;  // swap data (CmpSwap) or add data (FetchAdd)
    net::Be64 compare;   // compare data (CmpSwap; ignored by FetchAdd)
};
static_assert(sizeof(AtomicEth) == 28 && alignof(AtomicEth) == 1);

// Atomic ACK Extended Transport Header, 8 bytes: the remote data before the operation.
struct AtomicAckEth {
    net::Be64 orig;
};
static_assert(sizeof(AtomicAckEth) == 8 && alignof(AtomicAckEth) == 1);

// Immediate Data, 4 bytes: SEND/RDMA WRITE "with Immediate". Opaque to the transport:
// delivered to the receiver's completion as the four bytes on the wire.
struct ImmDt {
    net::Be32 imm;
};
static_assert(sizeof(ImmDt) == 4 && alignof(ImmDt) == 1);

// Invalidate Extended Transport Header, 4 bytes: SEND with Invalidate (the R_Key to invalidate).
struct Ieth {
    net::Be32 rkey;
};
static_assert(sizeof(Ieth) == 4 && alignof(Ieth) == 1);

// Datagram Extended Transport Header, 8 bytes: every UD packet.
struct Deth {
    net::Be32 qkey;
    std::uint8_t reserved;
    Be24 src_qp;
};
static_assert(sizeof(Deth) == 8 && alignof(Deth) == 1);

// The well-known Q_Key of the General Service Interface (QP1), IBA ch. 13 (GSI).
inline constexpr std::uint32_t kGsiQkey = 0x80010000;
// QP1: the GSI's QP number on every port (QP0, the SMI, does not exist on RoCE).
inline constexpr std::uint32_t kGsiQpn = 1;

// --- AETH syndrome (IBA vol 1 §9.3, AETH; its use in §9.7, reliable service) ---------------
// bit 7 reserved (0); bits 6-5 the type; bits 4-0 credit count (ACK), RNR timer code (RNR
// NAK) or NAK code (NAK).

enum class AckType : std::uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };

enum class NakCode : std::uint8_t {
    psn_sequence_error = 0,
    invalid_request = 1,
    remote_access_error = 2,
    remote_operational_error = 3,
    invalid_rd_request = 4,
};

inline constexpr std::uint8_t kAethValueMask = 0x1f;
inline constexpr std::uint8_t kCreditsInvalid = 0x1f;  // ACK credit field: no end-to-end credits

constexpr AckType aeth_type(std::uint8_t syndrome) {
    return static_cast<AckType>((syndrome >> 5) & 0x3);
}
constexpr std::uint8_t aeth_value(std::uint8_t syndrome) {
    return syndrome & kAethValueMask;
}
constexpr std::uint8_t aeth_syndrome(AckType type, std::uint8_t value) {
    return static_cast<std::uint8_t>(static_cast<std::uint8_t>(type) << 5 |
                                     (value & kAethValueMask));
}
constexpr std::uint8_t nak_syndrome(NakCode code) {
    return aeth_syndrome(AckType::nak, static_cast<std::uint8_t>(code));
}

static_assert(aeth_syndrome(AckType::ack, kCreditsInvalid) == 0x1f);
static_assert(nak_syndrome(NakCode::psn_sequence_error) == 0x60);
static_assert(aeth_type(0x20) == AckType::rnr_nak);

}  // namespace snic::roce
