#include "proto/cm/messages.h"

#include <type_traits>

namespace snic::cm {

Gid gid_from_ipv4(std::uint32_t ip) {
    Gid g{};
    g[10] = 0xFF;
    g[11] = 0xFF;
    g[12] = static_cast<std::uint8_t>(ip >> 24);
    g[13] = static_cast<std::uint8_t>(ip >> 16);
    g[14] = static_cast<std::uint8_t>(ip >> 8);
    g[15] = static_cast<std::uint8_t>(ip);
    return g;
}

std::optional<std::uint32_t> ipv4_from_gid(const Gid& g) {
    for (std::size_t i = 0; i < 10; ++i)
        if (g[i] != 0) return std::nullopt;
    if (g[10] != 0xFF || g[11] != 0xFF) return std::nullopt;
    return (std::uint32_t{g[12]} << 24) | (std::uint32_t{g[13]} << 16) |
           (std::uint32_t{g[14]} << 8) | g[15];
}

// The field tables: one line per field, (byte, bit from the MSB, width) or Bytes{offset},
// exactly as the IBA message content tables list them (offsets from the message start).

namespace {

// The path fields repeat in REQ at `base` (primary 52, alternate 96).
template <typename Self, typename F>
void each_path(Self& p, std::uint16_t base, F&& f) {
    const auto b = base;
    f(Field(0, 0, 16), p.local_lid, b);
    f(Field(2, 0, 16), p.remote_lid, b);
    f(Bytes{4}, p.local_gid, b);
    f(Bytes{20}, p.remote_gid, b);
    f(Field(36, 0, 20), p.flow_label, b);
    f(Field(39, 2, 6), p.packet_rate, b);
    f(Field(40, 0, 8), p.traffic_class, b);
    f(Field(41, 0, 8), p.hop_limit, b);
    f(Field(42, 0, 4), p.sl, b);
    f(Field(42, 4, 1), p.subnet_local, b);
    f(Field(43, 0, 5), p.local_ack_timeout, b);
}

}  // namespace

template <typename Self, typename F>
void ReqMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(8, 0, 64), m.service_id, 0);
    f(Field(16, 0, 64), m.local_ca_guid, 0);
    f(Field(28, 0, 32), m.local_qkey, 0);
    f(Field(32, 0, 24), m.local_qpn, 0);
    f(Field(35, 0, 8), m.responder_resources, 0);
    f(Field(36, 0, 24), m.local_eecn, 0);
    f(Field(39, 0, 8), m.initiator_depth, 0);
    f(Field(40, 0, 24), m.remote_eecn, 0);
    f(Field(43, 0, 5), m.remote_cm_response_timeout, 0);
    f(Field(43, 5, 2), m.transport_service_type, 0);
    f(Field(43, 7, 1), m.end_to_end_flow_control, 0);
    f(Field(44, 0, 24), m.starting_psn, 0);
    f(Field(47, 0, 5), m.local_cm_response_timeout, 0);
    f(Field(47, 5, 3), m.retry_count, 0);
    f(Field(48, 0, 16), m.pkey, 0);
    f(Field(50, 0, 4), m.path_mtu, 0);
    f(Field(50, 4, 1), m.rdc_exists, 0);
    f(Field(50, 5, 3), m.rnr_retry_count, 0);
    f(Field(51, 0, 4), m.max_cm_retries, 0);
    f(Field(51, 4, 1), m.srq, 0);
    f(Field(51, 5, 3), m.extended_transport_type, 0);
    each_path(m.primary, 52, f);
    each_path(m.alternate, 96, f);
    f(Field(139, 5, 1), m.sap_supported, 0);
    f(Bytes{140}, m.private_data, 0);
}

template <typename Self, typename F>
void MraMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Field(8, 0, 2), m.message_mraed, 0);
    f(Field(9, 0, 5), m.service_timeout, 0);
    f(Bytes{10}, m.private_data, 0);
}

template <typename Self, typename F>
void RejMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Field(8, 0, 2), m.message_rejected, 0);
    f(Field(9, 0, 7), m.ari_length, 0);
    f(Field(10, 0, 16), m.reason, 0);
    f(Bytes{12}, m.ari, 0);
    f(Bytes{84}, m.private_data, 0);
}

template <typename Self, typename F>
void RepMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Field(8, 0, 32), m.local_qkey, 0);
    f(Field(12, 0, 24), m.local_qpn, 0);
    f(Field(16, 0, 24), m.local_eecn, 0);
    f(Field(20, 0, 24), m.starting_psn, 0);
    f(Field(24, 0, 8), m.responder_resources, 0);
    f(Field(25, 0, 8), m.initiator_depth, 0);
    f(Field(26, 0, 5), m.target_ack_delay, 0);
    f(Field(26, 5, 2), m.failover_accepted, 0);
    f(Field(26, 7, 1), m.end_to_end_flow_control, 0);
    f(Field(27, 0, 3), m.rnr_retry_count, 0);
    f(Field(27, 3, 1), m.srq, 0);
    f(Field(28, 0, 64), m.local_ca_guid, 0);
    f(Bytes{36}, m.private_data, 0);
}

template <typename Self, typename F>
void RtuMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Bytes{8}, m.private_data, 0);
}

template <typename Self, typename F>
void DreqMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Field(8, 0, 24), m.remote_qpn, 0);
    f(Bytes{12}, m.private_data, 0);
}

template <typename Self, typename F>
void DrepMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Bytes{8}, m.private_data, 0);
}

template <typename Self, typename F>
void LapMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Field(12, 0, 24), m.remote_qpn, 0);
    f(Field(15, 0, 5), m.remote_cm_response_timeout, 0);
    f(Field(20, 0, 16), m.alt_local_lid, 0);
    f(Field(22, 0, 16), m.alt_remote_lid, 0);
    f(Bytes{24}, m.alt_local_gid, 0);
    f(Bytes{40}, m.alt_remote_gid, 0);
    f(Field(56, 0, 20), m.alt_flow_label, 0);
    f(Field(59, 0, 8), m.alt_traffic_class, 0);
    f(Field(60, 0, 8), m.alt_hop_limit, 0);
    f(Field(61, 2, 6), m.alt_packet_rate, 0);
    f(Field(62, 0, 4), m.alt_sl, 0);
    f(Field(62, 4, 1), m.alt_subnet_local, 0);
    f(Field(63, 0, 5), m.alt_local_ack_timeout, 0);
    f(Bytes{64}, m.private_data, 0);
}

template <typename Self, typename F>
void AprMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.local_comm_id, 0);
    f(Field(4, 0, 32), m.remote_comm_id, 0);
    f(Field(8, 0, 8), m.additional_info_length, 0);
    f(Field(9, 0, 8), m.ap_status, 0);
    f(Bytes{12}, m.additional_info, 0);
    f(Bytes{84}, m.private_data, 0);
}

template <typename Self, typename F>
void SidrReqMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.request_id, 0);
    f(Field(4, 0, 16), m.pkey, 0);
    f(Field(8, 0, 64), m.service_id, 0);
    f(Bytes{16}, m.private_data, 0);
}

template <typename Self, typename F>
void SidrRepMsg::each(Self& m, F&& f) {
    f(Field(0, 0, 32), m.request_id, 0);
    f(Field(4, 0, 8), m.status, 0);
    f(Field(5, 0, 8), m.additional_info_length, 0);
    f(Field(8, 0, 24), m.qpn, 0);
    f(Field(12, 0, 64), m.service_id, 0);
    f(Field(20, 0, 32), m.qkey, 0);
    f(Bytes{24}, m.additional_info, 0);
    f(Bytes{96}, m.private_data, 0);
}

namespace {

// A Field or Bytes moved by `base` bytes (the REQ path blocks).
Field at(Field f, std::uint16_t base) {
    Field g = f;
    g.byte = static_cast<std::uint16_t>(g.byte + base);
    return g;
}

template <typename M>
void encode_fields(const M& m, MadData out) {
    for (auto& b : out) b = 0;
    M::each(m, [&](auto where, const auto& value, std::uint16_t base) {
        if constexpr (std::is_same_v<decltype(where), Bytes>) {
            for (std::size_t i = 0; i < value.size(); ++i) out[base + where.byte + i] = value[i];
        } else {
            set_field(out, at(where, base), value);
        }
    });
}

template <typename M>
void decode_fields(M& m, ConstMadData in) {
    M::each(m, [&](auto where, auto& value, std::uint16_t base) {
        if constexpr (std::is_same_v<decltype(where), Bytes>) {
            for (std::size_t i = 0; i < value.size(); ++i) value[i] = in[base + where.byte + i];
        } else {
            value = static_cast<std::remove_reference_t<decltype(value)>>(
                get_field(in, at(where, base)));
        }
    });
}

// What each message's decode refuses beyond its layout.
bool valid(const ReqMsg& m) {
    return m.transport_service_type != 3;
}
bool valid(const RejMsg& m) {
    return m.ari_length <= kAriSize;
}
bool valid(const AprMsg& m) {
    return m.additional_info_length <= kAriSize;
}
bool valid(const SidrRepMsg& m) {
    return m.additional_info_length <= kAriSize;
}
template <typename M>
bool valid(const M&) {
    return true;
}

}  // namespace

void encode(const ReqMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const MraMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const RejMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const RepMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const RtuMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const DreqMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const DrepMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const LapMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const AprMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const SidrReqMsg& m, MadData out) {
    encode_fields(m, out);
}
void encode(const SidrRepMsg& m, MadData out) {
    encode_fields(m, out);
}

template <typename M>
std::optional<M> decode(ConstMadData in) {
    M m{};
    decode_fields(m, in);
    if (!valid(m)) return std::nullopt;
    return m;
}

template std::optional<ReqMsg> decode<ReqMsg>(ConstMadData);
template std::optional<MraMsg> decode<MraMsg>(ConstMadData);
template std::optional<RejMsg> decode<RejMsg>(ConstMadData);
template std::optional<RepMsg> decode<RepMsg>(ConstMadData);
template std::optional<RtuMsg> decode<RtuMsg>(ConstMadData);
template std::optional<DreqMsg> decode<DreqMsg>(ConstMadData);
template std::optional<DrepMsg> decode<DrepMsg>(ConstMadData);
template std::optional<LapMsg> decode<LapMsg>(ConstMadData);
template std::optional<AprMsg> decode<AprMsg>(ConstMadData);
template std::optional<SidrReqMsg> decode<SidrReqMsg>(ConstMadData);
template std::optional<SidrRepMsg> decode<SidrRepMsg>(ConstMadData);

}  // namespace snic::cm
