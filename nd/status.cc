// libndsnic: the ND status a work completion reports, from its verbs status. One row per
// verbs status; a status the table does not name is ND_UNSUCCESSFUL.
#include <array>
#include <utility>

#include "nd/provider.h"

namespace snic::nd {

namespace {

struct Row {
    ibv_wc_status wc;
    HRESULT nd;
};

constexpr std::array kStatus{
    Row{IBV_WC_SUCCESS, ND_SUCCESS},
    // A receive buffer too small for the message (ND: the receive's status).
    Row{IBV_WC_LOC_LEN_ERR, ND_BUFFER_OVERFLOW},
    Row{IBV_WC_LOC_QP_OP_ERR, ND_INTERNAL_ERROR},
    Row{IBV_WC_LOC_PROT_ERR, ND_ACCESS_VIOLATION},
    // Flushed: the connection ended, Flush or Disconnect.
    Row{IBV_WC_WR_FLUSH_ERR, ND_CANCELED},
    Row{IBV_WC_MW_BIND_ERR, ND_ACCESS_VIOLATION},
    Row{IBV_WC_BAD_RESP_ERR, ND_REMOTE_ERROR},
    Row{IBV_WC_LOC_ACCESS_ERR, ND_ACCESS_VIOLATION},
    Row{IBV_WC_REM_INV_REQ_ERR, ND_REMOTE_ERROR},
    // The peer refused the access: a key that is not (or no longer) valid, or out of bounds.
    Row{IBV_WC_REM_ACCESS_ERR, ND_ACCESS_VIOLATION},
    Row{IBV_WC_REM_OP_ERR, ND_REMOTE_ERROR},
    Row{IBV_WC_RETRY_EXC_ERR, ND_IO_TIMEOUT},
    Row{IBV_WC_RNR_RETRY_EXC_ERR, ND_IO_TIMEOUT},
    Row{IBV_WC_REM_ABORT_ERR, ND_CONNECTION_ABORTED},
    Row{IBV_WC_FATAL_ERR, ND_INTERNAL_ERROR},
    Row{IBV_WC_RESP_TIMEOUT_ERR, ND_IO_TIMEOUT},
    Row{IBV_WC_GENERAL_ERR, ND_UNSUCCESSFUL},
};

consteval bool rows_unique() {
    for (std::size_t i = 0; i < kStatus.size(); ++i)
        for (std::size_t j = i + 1; j < kStatus.size(); ++j)
            if (kStatus[i].wc == kStatus[j].wc) return false;
    return true;
}
static_assert(rows_unique(), "a verbs status mapped twice");
static_assert(kStatus[0].wc == IBV_WC_SUCCESS && kStatus[0].nd == ND_SUCCESS);

}  // namespace

HRESULT status_of(ibv_wc_status s) {
    for (const Row& r : kStatus)
        if (r.wc == s) return r.nd;
    return ND_UNSUCCESSFUL;
}

}  // namespace snic::nd
