/* libsnic's extensions to the verbs API: what snic offers beyond rdma-core's
 * <infiniband/verbs.h>. Installed as <snic/snic_ext.h>; C and C++. */
#ifndef SNIC_EXT_H
#define SNIC_EXT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_context;
struct ibv_cq;
struct ibv_qp;
struct in_addr;

/* A QP's receive side, as snicd counts it while it works, from one consistent snapshot:
 *   taken      receive WQEs the QP has taken (from its own receive queue or from its SRQ)
 *              for arriving messages; a WQE flushed from the QP's own receive queue counts
 *              too, as it is taken to be flushed;
 *   completed  receive completions made for the QP: successful, in error or flushed.
 * Both are cumulative since the QP was created or last reset (Modify QP to RESET sets both
 * to 0). A snapshot always has taken >= completed; taken - completed is the number of
 * receives in progress (1 while a multi-packet SEND is being received, until its last
 * packet completes it). A completion is counted before it reaches the CQ. */
struct snic_qp_recv_state {
    uint64_t taken;
    uint64_t completed;
};

/* Reads the counters of `qp` (a QP of a libsnic context) into *state. No system call, no
 * round trip to snicd: they are read from memory snicd shares with the process. Returns 0,
 * EINVAL (a null argument) or EIO (snicd is gone). */
int snic_query_qp_recv(struct ibv_qp* qp, struct snic_qp_recv_state* state);

/* The IPv4 address of port `port_num` (1) of a libsnic device, into *addr (network order):
 * what rdma_cm binds and connects from on it. A RoCE device's GID 0 holds it too
 * (::ffff:a.b.c.d); an iWARP device's GIDs are MAC-based, as on every iWARP RNIC, so this is
 * where a consumer that opened an iWARP device by name finds its address. Returns 0,
 * EINVAL (a null argument or another port) or ENODATA (the port has no address). */
int snic_query_port_ipv4(struct ibv_context* ctx, uint8_t port_num, struct in_addr* addr);

/* A receive completion whose message asked for a solicited event (a SEND or RDMA WRITE with
 * immediate sent with IBV_SEND_SOLICITED; RDMAP's Send with Solicited Event on iWARP), in
 * ibv_wc.wc_flags (and ibv_wc_read_wc_flags) of a CQ that snic_cq_report_solicited turned on.
 * verbs has no such flag: a consumer that waits for solicited completions only (DAT's
 * DAT_COMPLETION_SOLICITED_WAIT_FLAG) on a CQ it shares with other work tells them apart
 * with it. Off by default, so a CQ's wc_flags hold verbs' flags alone. */
#define SNIC_WC_SOLICITED (1u << 31)

/* Turns the reporting of SNIC_WC_SOLICITED on (on != 0) or off for `cq` (a CQ of a libsnic
 * context), for the completions polled from then on. Returns 0 or EINVAL (a null cq). */
int snic_cq_report_solicited(struct ibv_cq* cq, int on);

#ifdef __cplusplus
}
#endif

#endif /* SNIC_EXT_H */
