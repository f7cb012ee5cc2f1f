#include "proto/roce/opcode.h"

#include <utility>

namespace snic::roce {

std::optional<Opcode> opcode_by_name(std::string_view name) {
    for (const auto& row : detail::kOpcodeRows) {
        if (row.name == name) return row.opcode;
    }
    return std::nullopt;
}

std::string props_to_string(std::uint32_t props) {
    static constexpr std::pair<std::uint32_t, std::string_view> kFlagNames[] = {
        {kHasPayload, "payload"},
        {kFirst, "first"},
        {kMiddle, "middle"},
        {kLast, "last"},
        {kRequest, "request"},
        {kResponse, "response"},
        {kSend, "send"},
        {kWrite, "write"},
        {kRead, "read"},
        {kAtomic, "atomic"},
        {kAcknowledge, "acknowledge"},
        {kNeedsAck, "needs_ack"},
        {kTakesRecvWqe, "takes_recv_wqe"},
        {kCompletesRecv, "completes_recv"},
    };
    std::string out;
    const auto add = [&out](std::string_view s) {
        if (!out.empty()) out += '|';
        out += s;
    };
    for (std::size_t e = 0; e < kExtCount; ++e) {
        if (props & (1u << e)) add(kExtNames[e]);
    }
    for (const auto& [bit, name] : kFlagNames) {
        if (props & bit) add(name);
    }
    return out;
}

}  // namespace snic::roce
