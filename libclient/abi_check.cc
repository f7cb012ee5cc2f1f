// shm/wqe.h says its numbers are those of verbs; here the compiler checks it.
#include <infiniband/verbs.h>

#include <cstddef>

#include "proto/verbs/wr.h"
#include "shm/control_abi.h"
#include "shm/wqe.h"

namespace snic::client {

using shm::WrOpcode;
static_assert(static_cast<int>(WrOpcode::rdma_write) == IBV_WR_RDMA_WRITE);
static_assert(static_cast<int>(WrOpcode::rdma_write_imm) == IBV_WR_RDMA_WRITE_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::send) == IBV_WR_SEND);
static_assert(static_cast<int>(WrOpcode::send_imm) == IBV_WR_SEND_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::rdma_read) == IBV_WR_RDMA_READ);
static_assert(static_cast<int>(WrOpcode::atomic_cmp_swp) == IBV_WR_ATOMIC_CMP_AND_SWP);
static_assert(static_cast<int>(WrOpcode::atomic_fetch_add) == IBV_WR_ATOMIC_FETCH_AND_ADD);
static_assert(static_cast<int>(WrOpcode::local_inv) == IBV_WR_LOCAL_INV);
static_assert(static_cast<int>(WrOpcode::bind_mw) == IBV_WR_BIND_MW);
static_assert(static_cast<int>(WrOpcode::send_inv) == IBV_WR_SEND_WITH_INV);

// The flush completions libsnic makes take their opcodes from proto/verbs' table.
using verbs::WcOpcode;
static_assert(static_cast<int>(WcOpcode::send) == IBV_WC_SEND);
static_assert(static_cast<int>(WcOpcode::rdma_write) == IBV_WC_RDMA_WRITE);
static_assert(static_cast<int>(WcOpcode::rdma_read) == IBV_WC_RDMA_READ);
static_assert(static_cast<int>(WcOpcode::comp_swap) == IBV_WC_COMP_SWAP);
static_assert(static_cast<int>(WcOpcode::fetch_add) == IBV_WC_FETCH_ADD);
static_assert(static_cast<int>(WcOpcode::bind_mw) == IBV_WC_BIND_MW);
static_assert(static_cast<int>(WcOpcode::local_inv) == IBV_WC_LOCAL_INV);
static_assert(static_cast<int>(verbs::WrOp::send_inv) == static_cast<int>(WrOpcode::send_inv));

static_assert(shm::kWqeFence == IBV_SEND_FENCE);
static_assert(shm::kWqeSignaled == IBV_SEND_SIGNALED);
static_assert(shm::kWqeSolicited == IBV_SEND_SOLICITED);
static_assert(shm::kWqeInline == IBV_SEND_INLINE);

// Cqe::status, opcode and wc_flags are 8-bit copies of the verbs values.
static_assert(IBV_WC_TM_RNDV_INCOMPLETE <= 0xff);
static_assert(IBV_WC_DRIVER3 <= 0xff);
static_assert(IBV_WC_WITH_INV <= 0xff && IBV_WC_GRH <= 0xff && IBV_WC_WITH_IMM <= 0xff);

// The work request limits fit the verbs fields and the WQE.
static_assert(shm::kMaxSge <= 0xff);
static_assert(sizeof(shm::Sge) == sizeof(ibv_sge));
static_assert(offsetof(ibv_sge, addr) == offsetof(shm::Sge, addr));
static_assert(offsetof(ibv_sge, length) == offsetof(shm::Sge, length));
static_assert(offsetof(ibv_sge, lkey) == offsetof(shm::Sge, lkey));

// Arming values of CqControl::arm.
static_assert(shm::kArmNext != 0 && shm::kArmSolicited != 0 && shm::kArmNext != shm::kArmSolicited);

// QP states, types, MTUs and port states travel as their verbs numbers.
static_assert(IBV_QPS_RESET == 0 && IBV_QPS_INIT == 1 && IBV_QPS_RTR == 2 && IBV_QPS_RTS == 3 &&
              IBV_QPS_SQD == 4 && IBV_QPS_SQE == 5 && IBV_QPS_ERR == 6);
static_assert(IBV_QPT_RC == 2 && IBV_QPT_UC == 3 && IBV_QPT_UD == 4);
static_assert(IBV_MTU_256 == 1 && IBV_MTU_4096 == 5);
static_assert(IBV_PORT_DOWN == 1 && IBV_PORT_ACTIVE == 4);
static_assert(IBV_MW_TYPE_1 == 1 && IBV_MW_TYPE_2 == 2);

}  // namespace snic::client
