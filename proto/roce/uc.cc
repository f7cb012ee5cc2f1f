// UC's responder (IBA vol 1 §9.8, unreliable service; §9.9.3 for the errors a responder
// meets): RC's execution of SEND and RDMA WRITE packets (responder.cc) without any answer.
//
// PSNs follow the Linux soft-RoCE driver (rxe_resp.c, check_psn for UC), the peer snic must
// match on the wire: a MIDDLE or LAST packet is executed only at the expected PSN (ePSN) and
// while its message is being received; a FIRST or ONLY packet starts a message whatever its
// PSN, and ePSN follows it. A gap, an old PSN, an opcode out of sequence or a packet that
// cannot be executed (lengths, no receive WR, a WRITE's key, bounds or rights) drops the
// message in progress and every later packet up to the next FIRST or ONLY. Nothing is
// answered and nothing completes in error: a receive WR already taken by a dropped SEND is
// kept and filled from the start by the next message (a WRITE with immediate takes it too).
// Only a fault of the receive WR's own memory completes it in error, and the QP goes to the
// error state, as for RC.
//
// Where rxe differs: a FIRST or ONLY packet that arrives while a message is in progress
// starts the new message here (the partial one is dropped, as IBA's class D1 describes); rxe
// drops that packet too, and with it the whole next message.
#include "proto/roce/psn.h"
#include "proto/roce/rc_qp.h"

namespace snic::roce {

void RcQp::uc_on_packet(const Packet& pkt) {
    const OpcodeInfo& info = *pkt.info;
    const std::uint32_t psn = pkt.bth().psn.host();
    const bool send = info.has(kSend);
    (send ? counters_.rx_send_packets : counters_.rx_write_packets).add();
    if (psn != epsn_) counters_.out_of_sequence.add();

    if (info.has(kFirst)) {
        // A new message, wherever the last one stopped: ePSN resynchronises to it.
        if (in_msg_ != InMsg::none) counters_.uc_drop_messages.add();  // cut short
        in_msg_ = InMsg::none;
        uc_dropping_ = false;
        epsn_ = psn;
    } else if (uc_dropping_ || psn != epsn_ || in_msg_ != (send ? InMsg::send : InMsg::write)) {
        // Not the next packet of the message being received: that message is lost.
        counters_.uc_drop_packets.add();
        if (!uc_dropping_ && psn == epsn_)
            counters_.uc_drop_bad_request.add();  // in sequence, but of no or another message
        uc_drop_message();
        return;
    }
    if (pkt.payload.size() > cfg_.mtu) return uc_fault(ExecFault::bad_request);
    const ExecFault fault = send ? resp_send(pkt) : resp_write(pkt);
    if (fault != ExecFault::none) uc_fault(fault);
}

// The packet at ePSN could not be executed: its message is dropped, silently (UC answers
// nothing). The receive WR's own memory failing is the receiver's fault: it completes in error
// and the QP goes to the error state.
void RcQp::uc_fault(ExecFault fault) {
    counters_.uc_drop_packets.add();
    switch (fault) {
        case ExecFault::no_recv:
            counters_.uc_drop_no_recv.add();
            break;
        case ExecFault::no_access:
            counters_.uc_drop_bad_access.add();
            break;
        case ExecFault::local_memory:
            complete_recv_error(recv_, WcStatus::loc_prot_err);
            have_recv_ = false;
            fail(RcError::local_error);
            return;
        case ExecFault::none:
        case ExecFault::bad_request:
        case ExecFault::too_long:
        case ExecFault::invalidate:  // no UC opcode carries an IETH
        case ExecFault::bad_icrc:    // RcQp::on_packet settles UC's ICRC before this
            counters_.uc_drop_bad_request.add();
            break;
    }
    uc_drop_message();
}

// Gives up the message in progress (if any) and drops every packet up to the next FIRST or
// ONLY. A receive WR taken for it stays with the QP for the next message.
void RcQp::uc_drop_message() {
    if (!uc_dropping_) counters_.uc_drop_messages.add();
    uc_dropping_ = true;
    in_msg_ = InMsg::none;
}

}  // namespace snic::roce
