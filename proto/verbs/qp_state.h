// The IBA queue pair state machine (IBA vol 1 §10.3.1 and the Modify QP table of §11.2.4.2):
// which state transitions a Modify QP may ask for, per transport service type, and which
// attributes each transition requires and allows. The facts are one constexpr table; the
// numeric values of states, types and attribute bits are those of libibverbs
// (ibv_qp_state, ibv_qp_type, ibv_qp_attr_mask), so that callers convert with a cast.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace snic::verbs {

enum class QpState : std::uint8_t { reset = 0, init, rtr, rts, sqd, sqe, err };
inline constexpr std::size_t kQpStates = 7;

// The transport service types snic implements: reliable connected, unreliable connected,
// unreliable datagram.
enum class QpType : std::uint8_t { rc = 2, uc = 3, ud = 4 };

// The state named by a verbs value, or nullopt outside RESET..ERR.
constexpr std::optional<QpState> qp_state_from(std::uint32_t v) {
    if (v >= kQpStates) return std::nullopt;
    return static_cast<QpState>(v);
}
// The type named by a verbs value, or nullopt for a type snic does not implement.
constexpr std::optional<QpType> qp_type_from(std::uint32_t v) {
    if (v < 2 || v > 4) return std::nullopt;
    return static_cast<QpType>(v);
}

// Why a QP of ibv_qp_type `v` cannot be created: EOPNOTSUPP for the types verbs defines that
// snic has no engine for (raw packet 8, XRC send 9 and receive 10, driver-specific 0xff), as
// the Linux soft-RoCE and soft-iWARP drivers refuse what they do not offer; EINVAL for a value
// that names no type (as the kernel's uverbs refuses one); 0 for RC, UC and UD.
constexpr int qp_type_refusal(std::uint32_t v) {
    if (qp_type_from(v)) return 0;
    return v == 8 || v == 9 || v == 10 || v == 0xff ? EOPNOTSUPP : EINVAL;
}

const char* qp_state_name(QpState s);
// "RC", "UC", "UD", or "?" for a value snic does not implement.
const char* qp_type_name(std::uint32_t ibv_qp_type);

// The bytes of a path MTU given as an ibv_mtu (1: 256 ... 5: 4096), 0 for any other value.
constexpr std::uint32_t path_mtu_bytes(std::uint32_t ibv_mtu) {
    return ibv_mtu >= 1 && ibv_mtu <= 5 ? 128u << ibv_mtu : 0;
}

// Attribute mask bits of a Modify QP (ibv_qp_attr_mask values).
namespace qp_attr {
inline constexpr std::uint32_t state = 1u << 0;
inline constexpr std::uint32_t cur_state = 1u << 1;
inline constexpr std::uint32_t en_sqd_async_notify = 1u << 2;
inline constexpr std::uint32_t access_flags = 1u << 3;
inline constexpr std::uint32_t pkey_index = 1u << 4;
inline constexpr std::uint32_t port = 1u << 5;
inline constexpr std::uint32_t qkey = 1u << 6;
inline constexpr std::uint32_t av = 1u << 7;
inline constexpr std::uint32_t path_mtu = 1u << 8;
inline constexpr std::uint32_t timeout = 1u << 9;
inline constexpr std::uint32_t retry_cnt = 1u << 10;
inline constexpr std::uint32_t rnr_retry = 1u << 11;
inline constexpr std::uint32_t rq_psn = 1u << 12;
inline constexpr std::uint32_t max_qp_rd_atomic = 1u << 13;
inline constexpr std::uint32_t alt_path = 1u << 14;
inline constexpr std::uint32_t min_rnr_timer = 1u << 15;
inline constexpr std::uint32_t sq_psn = 1u << 16;
inline constexpr std::uint32_t max_dest_rd_atomic = 1u << 17;
inline constexpr std::uint32_t path_mig_state = 1u << 18;
inline constexpr std::uint32_t cap = 1u << 19;
inline constexpr std::uint32_t dest_qpn = 1u << 20;
inline constexpr std::uint32_t rate_limit = 1u << 25;
}  // namespace qp_attr

// One transition for one QP type: allowed or not, the attributes it must be given and the
// ones it may be given (the state bit itself is always allowed).
struct QpTransition {
    bool allowed = false;
    std::uint32_t required = 0;
    std::uint32_t optional = 0;
};

// The rule for cur -> next on a QP of type `type`.
QpTransition qp_transition(QpState cur, QpState next, QpType type);

// Whether a Modify QP from `cur` to `next` with attribute mask `mask` is valid for `type`:
// the transition exists, every required attribute is in the mask, nothing outside
// required | optional | state is, and the current state is only named (cur_state) from
// RTR, RTS, SQD or SQE. Only the mask is checked here, not the attribute values.
bool qp_modify_ok(QpState cur, QpState next, QpType type, std::uint32_t mask);

}  // namespace snic::verbs
