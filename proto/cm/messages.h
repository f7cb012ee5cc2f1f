// The CM messages of IBA vol 1 §12.6 (the message content tables): REQ, MRA, REJ, REP, RTU, DREQ,
// DREP, LAP, APR, SIDR_REQ, SIDR_REP. Each message is a struct of host-order fields plus one table
// (its `each`) that names every field's place in the 232 bytes of MAD data; encoding and
// decoding are the same loop over that table for every message. Offsets are from the start
// of the message (the MAD data), as in the IBA tables.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "proto/cm/mad.h"
#include "proto/cm/wire.h"

namespace snic::cm {

// A byte range of a message (GIDs, ARI, private data): offset; the size is the member's.
struct Bytes {
    std::uint16_t byte;
};

// The CM attribute IDs (IBA §12.6, the CM attribute table).
enum class AttrId : std::uint16_t {
    class_port_info = 0x0001,
    req = 0x0010,
    mra = 0x0011,
    rej = 0x0012,
    rep = 0x0013,
    rtu = 0x0014,
    dreq = 0x0015,
    drep = 0x0016,
    sidr_req = 0x0017,
    sidr_rep = 0x0018,
    lap = 0x0019,
    apr = 0x001A,
};

// Private data sizes (IBA §12.6).
inline constexpr std::size_t kReqPrivate = 92, kMraPrivate = 222, kRejPrivate = 148,
                             kRepPrivate = 196, kRtuPrivate = 224, kDreqPrivate = 220,
                             kDrepPrivate = 224, kLapPrivate = 168, kAprPrivate = 148,
                             kSidrReqPrivate = 216, kSidrRepPrivate = 136;
inline constexpr std::size_t kAriSize = 72;  // REJ ARI, APR and SIDR_REP additional info

using Gid = std::array<std::uint8_t, 16>;
// The IPv4-mapped GID ::ffff:a.b.c.d RoCEv2 uses for an IPv4 address (host order in).
Gid gid_from_ipv4(std::uint32_t ip);
// The IPv4 address of an IPv4-mapped GID, or nullopt for any other GID.
std::optional<std::uint32_t> ipv4_from_gid(const Gid& gid);

inline constexpr std::uint16_t kPermissiveLid = 0xFFFF;  // the LIDs of a RoCE path

// REJ "message rejected" and MRA "message MRAed" (IBA §12.6.6, §12.6.7).
enum class MsgCode : std::uint8_t { req = 0, rep = 1, other = 2 };  // other: LAP for MRA

// REQ transport service type (IBA §12.6.5).
enum class TransportType : std::uint8_t { rc = 0, uc = 1, rd = 2 };

// REQ. The path fields of REQ repeat for the primary and alternate path.
struct PathFields {
    std::uint16_t local_lid = 0;
    std::uint16_t remote_lid = 0;
    Gid local_gid{};
    Gid remote_gid{};
    std::uint32_t flow_label = 0;  // 20 bits
    std::uint8_t packet_rate = 0;  // 6 bits
    std::uint8_t traffic_class = 0;
    std::uint8_t hop_limit = 0;
    std::uint8_t sl = 0;                 // 4 bits
    std::uint8_t subnet_local = 0;       // 1 bit
    std::uint8_t local_ack_timeout = 0;  // 5 bits
};

struct ReqMsg {
    static constexpr AttrId kAttr = AttrId::req;
    std::uint32_t local_comm_id = 0;
    std::uint64_t service_id = 0;
    std::uint64_t local_ca_guid = 0;
    std::uint32_t local_qkey = 0;
    std::uint32_t local_qpn = 0;  // 24 bits
    std::uint8_t responder_resources = 0;
    std::uint32_t local_eecn = 0;  // 24 bits
    std::uint8_t initiator_depth = 0;
    std::uint32_t remote_eecn = 0;                // 24 bits
    std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
    std::uint8_t transport_service_type = 0;      // 2 bits, TransportType
    std::uint8_t end_to_end_flow_control = 0;     // 1 bit
    std::uint32_t starting_psn = 0;               // 24 bits
    std::uint8_t local_cm_response_timeout = 0;   // 5 bits
    std::uint8_t retry_count = 0;                 // 3 bits
    std::uint16_t pkey = 0xFFFF;
    std::uint8_t path_mtu = 0;                 // 4 bits
    std::uint8_t rdc_exists = 0;               // 1 bit
    std::uint8_t rnr_retry_count = 0;          // 3 bits
    std::uint8_t max_cm_retries = 0;           // 4 bits
    std::uint8_t srq = 0;                      // 1 bit
    std::uint8_t extended_transport_type = 0;  // 3 bits
    PathFields primary{.local_lid = kPermissiveLid, .remote_lid = kPermissiveLid};
    PathFields alternate;            // all zero: no alternate path
    std::uint8_t sap_supported = 0;  // 1 bit
    std::array<std::uint8_t, kReqPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// MRA.
struct MraMsg {
    static constexpr AttrId kAttr = AttrId::mra;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint8_t message_mraed = 0;    // 2 bits, MsgCode
    std::uint8_t service_timeout = 0;  // 5 bits
    std::array<std::uint8_t, kMraPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// REJ.
struct RejMsg {
    static constexpr AttrId kAttr = AttrId::rej;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint8_t message_rejected = 0;  // 2 bits, MsgCode
    std::uint8_t ari_length = 0;        // 7 bits, <= 72
    std::uint16_t reason = 0;           // rej_reason
    std::array<std::uint8_t, kAriSize> ari{};
    std::array<std::uint8_t, kRejPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// REP.
struct RepMsg {
    static constexpr AttrId kAttr = AttrId::rep;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint32_t local_qkey = 0;
    std::uint32_t local_qpn = 0;     // 24 bits
    std::uint32_t local_eecn = 0;    // 24 bits
    std::uint32_t starting_psn = 0;  // 24 bits
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t target_ack_delay = 0;         // 5 bits
    std::uint8_t failover_accepted = 0;        // 2 bits
    std::uint8_t end_to_end_flow_control = 0;  // 1 bit
    std::uint8_t rnr_retry_count = 0;          // 3 bits
    std::uint8_t srq = 0;                      // 1 bit
    std::uint64_t local_ca_guid = 0;
    std::array<std::uint8_t, kRepPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// RTU, DREQ, DREP.
struct RtuMsg {
    static constexpr AttrId kAttr = AttrId::rtu;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::array<std::uint8_t, kRtuPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

struct DreqMsg {
    static constexpr AttrId kAttr = AttrId::dreq;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint32_t remote_qpn = 0;  // 24 bits: the receiver's QPN/EECN
    std::array<std::uint8_t, kDreqPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

struct DrepMsg {
    static constexpr AttrId kAttr = AttrId::drep;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::array<std::uint8_t, kDrepPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// LAP: the alternate path load request; the agent answers it with APR.
struct LapMsg {
    static constexpr AttrId kAttr = AttrId::lap;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint32_t remote_qpn = 0;                 // 24 bits
    std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
    std::uint16_t alt_local_lid = 0, alt_remote_lid = 0;
    Gid alt_local_gid{}, alt_remote_gid{};
    std::uint32_t alt_flow_label = 0;  // 20 bits
    std::uint8_t alt_traffic_class = 0, alt_hop_limit = 0;
    std::uint8_t alt_packet_rate = 0;        // 6 bits
    std::uint8_t alt_sl = 0;                 // 4 bits
    std::uint8_t alt_subnet_local = 0;       // 1 bit
    std::uint8_t alt_local_ack_timeout = 0;  // 5 bits
    std::array<std::uint8_t, kLapPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// APR. AP status values: AprStatus.
struct AprMsg {
    static constexpr AttrId kAttr = AttrId::apr;
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint8_t additional_info_length = 0;  // <= 72
    std::uint8_t ap_status = 0;
    std::array<std::uint8_t, kAriSize> additional_info{};
    std::array<std::uint8_t, kAprPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// SIDR_REQ, SIDR_REP. SIDR_REP status values: SidrStatus.
struct SidrReqMsg {
    static constexpr AttrId kAttr = AttrId::sidr_req;
    std::uint32_t request_id = 0;
    std::uint16_t pkey = 0xFFFF;
    std::uint64_t service_id = 0;
    std::array<std::uint8_t, kSidrReqPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

struct SidrRepMsg {
    static constexpr AttrId kAttr = AttrId::sidr_rep;
    std::uint32_t request_id = 0;
    std::uint8_t status = 0;
    std::uint8_t additional_info_length = 0;  // <= 72
    std::uint32_t qpn = 0;                    // 24 bits
    std::uint64_t service_id = 0;
    std::uint32_t qkey = 0;
    std::array<std::uint8_t, kAriSize> additional_info{};
    std::array<std::uint8_t, kSidrRepPrivate> private_data{};

    template <typename Self, typename F>
    static void each(Self& m, F&& f);
};

// REJ reasons (IBA §12.6.7, the rejection reason table) the agent uses or names.
namespace rej_reason {
inline constexpr std::uint16_t no_qp = 1;
inline constexpr std::uint16_t no_resources = 3;
inline constexpr std::uint16_t timeout = 4;
inline constexpr std::uint16_t unsupported = 5;
inline constexpr std::uint16_t invalid_comm_id = 6;
inline constexpr std::uint16_t invalid_service_id = 8;
inline constexpr std::uint16_t invalid_transport_type = 9;
inline constexpr std::uint16_t stale_connection = 10;
inline constexpr std::uint16_t consumer_reject = 28;
}  // namespace rej_reason

// APR AP status (IBA §12.8, the APR status table).
namespace apr_status {
inline constexpr std::uint8_t success = 0;
inline constexpr std::uint8_t invalid_comm_id = 1;
inline constexpr std::uint8_t unsupported = 2;  // "path alternation not supported"
inline constexpr std::uint8_t rejected = 3;
}  // namespace apr_status

// SIDR_REP status (IBA §12.11, the SIDR_REP status table).
namespace sidr_status {
inline constexpr std::uint8_t valid = 0;
inline constexpr std::uint8_t service_id_not_supported = 1;
inline constexpr std::uint8_t rejected = 2;
inline constexpr std::uint8_t no_qp = 3;
inline constexpr std::uint8_t redirect = 4;
inline constexpr std::uint8_t version_not_supported = 5;
}  // namespace sidr_status

// Encoding: the whole message into the 232 data bytes (every byte written: reserved ones
// zero). Decoding: nullopt when a field holds a value IBA reserves (a REQ transport type of
// 3, an ARI or additional-information length past 72).
void encode(const ReqMsg& m, MadData out);
void encode(const MraMsg& m, MadData out);
void encode(const RejMsg& m, MadData out);
void encode(const RepMsg& m, MadData out);
void encode(const RtuMsg& m, MadData out);
void encode(const DreqMsg& m, MadData out);
void encode(const DrepMsg& m, MadData out);
void encode(const LapMsg& m, MadData out);
void encode(const AprMsg& m, MadData out);
void encode(const SidrReqMsg& m, MadData out);
void encode(const SidrRepMsg& m, MadData out);

template <typename M>
std::optional<M> decode(ConstMadData in);

// A whole MAD: the CM header (class 0x07, version 2, Send, the message's attribute ID and
// the given transaction ID) and the message.
template <typename M>
Mad build_mad(std::uint64_t tid, const M& m) {
    Mad mad{};
    MadHeader h;
    h.tid = tid;
    h.attr_id = static_cast<std::uint16_t>(M::kAttr);
    write_mad_header(h, mad);
    encode(m, MadData(mad.data() + kMadHeaderSize, kMadDataSize));
    return mad;
}

// Copies `src` to the front of a message's private data (the rest zero); false when it
// does not fit.
template <std::size_t N>
bool set_private(std::array<std::uint8_t, N>& dst, std::span<const std::uint8_t> src) {
    if (src.size() > N) return false;
    dst.fill(0);
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
    return true;
}

}  // namespace snic::cm
