/* The DAT rule tests' harness: two IAs opened in one process through libdat2 (the server
 * side on one device, the client side on the other), connected to each other by one thread
 * that drives both ends, and one output line per rule: "PASS <rule>" or "FAIL <rule>: why".
 *
 * Written against the DAT 2.0 API only (<dat2/udat.h>), so that it runs over any provider
 * registered in the dat.conf that DAT_OVERRIDE names. Every wait is bounded (H_WAIT_US); a
 * bound that expires is a failure, never a way to synchronise. */
#ifndef SNIC_TESTS_DAT_HARNESS_H
#define SNIC_TESTS_DAT_HARNESS_H

#include <dat2/udat.h>
#include <stddef.h>
#include <stdint.h>

#define H_WAIT_US (30 * 1000 * 1000) /* bound of every wait for an expected event */
#define H_QLEN 256                   /* each EVD's queue length */

/* One IA with its PZ and EVDs (one of each kind, shared by the IA's EPs). */
struct h_side {
    char* name;
    DAT_IA_HANDLE ia;
    DAT_PZ_HANDLE pz;
    DAT_EVD_HANDLE async_evd, cr_evd, conn_evd, req_evd, rcv_evd;
    DAT_IA_ATTR ia_attr;
    DAT_PROVIDER_ATTR prov_attr;
};

/* Both IAs: `srv` listens, `cli` connects. `iwarp` (-t iwarp): the devices are iWARP
 * RNICs, where a request completes once the transport took it, not when the peer acknowledged
 * it (a rule that needs the peer's side waits for it there). */
struct h_pair {
    struct h_side srv, cli;
    int iwarp;
};

/* A registered buffer. */
struct h_mem {
    unsigned char* buf;
    DAT_VLEN len;
    DAT_LMR_HANDLE lmr;
    DAT_LMR_CONTEXT lmr_ctx;
    DAT_RMR_CONTEXT rmr_ctx;
};

/* ---- rules and checks ---------------------------------------------------------------- */

/* Runs rule function `fn` under `name` if the command line selects it (-r NAME, default
 * all); prints its one line. */
#define H_RULE(name, fn, pair) h_run_rule(name, fn, pair)
void h_run_rule(const char* name, void (*fn)(struct h_pair*), struct h_pair* pair);

/* Records a failed check of the current rule (the first one is printed). */
void h_fail(int line, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define EXPECT(cond, ...)                           \
    do {                                            \
        if (!(cond)) h_fail(__LINE__, __VA_ARGS__); \
    } while (0)
#define REQUIRE(cond, ...)                 \
    do {                                   \
        if (!(cond)) {                     \
            h_fail(__LINE__, __VA_ARGS__); \
            return;                        \
        }                                  \
    } while (0)
#define REQUIRE_OK(ret, what) REQUIRE((ret) == DAT_SUCCESS, "%s: %s", what, h_str(ret))
/* A call that must fail with the major code `type` (DAT_GET_TYPE); `ret` is evaluated once. */
#define EXPECT_TYPE(ret, type, what)                                                   \
    do {                                                                               \
        const DAT_RETURN r_ = (ret);                                                   \
        EXPECT(DAT_GET_TYPE(r_) == (type), "%s returned %s, want %s", what, h_str(r_), \
               h_str(type));                                                           \
    } while (0)

/* "DAT_INVALID_STATE" etc.: the major code's name (and the minor's, when there is one). */
const char* h_str(DAT_RETURN ret);
const char* h_event_str(DAT_EVENT_NUMBER ev);

/* ---- setup --------------------------------------------------------------------------- */

/* Parses -a SERVER_IA -b CLIENT_IA -p BASE_PORT [-r RULE]; opens both IAs. Exits 2 on a
 * setup failure (printed). With -l the rules' names are printed and nothing is run. */
void h_init(int argc, char** argv, struct h_pair* pair);
/* Closes both IAs; returns the exit status: 0 when every rule run passed, 1 otherwise. */
int h_finish(struct h_pair* pair);

/* A fresh connection qualifier for this run (base port + a counter). */
DAT_CONN_QUAL h_port(void);

/* The default RC EP attributes: `recvs` receives and `reqs` requests of `iov` segments,
 * `rd_in`/`rd_out` RDMA Reads. */
DAT_EP_ATTR h_ep_attr(int recvs, int reqs, int iov, int rd_in, int rd_out);
DAT_RETURN h_ep(struct h_side* s, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* ep);

/* Registers a fresh zeroed buffer of `len` bytes in `pz` (the side's if DAT_HANDLE_NULL). */
DAT_RETURN h_mem(struct h_side* s, DAT_PZ_HANDLE pz, DAT_VLEN len, DAT_MEM_PRIV_FLAGS priv,
                 struct h_mem* m);
void h_mem_free(struct h_mem* m);
DAT_LMR_TRIPLET h_iov(const struct h_mem* m, DAT_VLEN off, DAT_VLEN len);

/* ---- events -------------------------------------------------------------------------- */

/* Waits (bounded) for the next event of `evd`. */
DAT_RETURN h_wait(DAT_EVD_HANDLE evd, DAT_EVENT* ev);
/* Waits for the next event of `evd` and checks it is `want` (for `ep` if not NULL). */
DAT_RETURN h_expect_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, DAT_EP_HANDLE ep,
                          DAT_EVENT* ev);
/* Whether `evd` holds no event now. */
int h_empty(DAT_EVD_HANDLE evd);

/* ---- connections --------------------------------------------------------------------- */

/* Connects client EP `cep` to server EP `sep`, both ends in this thread: a PSP on a fresh
 * port, dat_ep_connect with `pd` (may be NULL), the CR accepted with `sep`, ESTABLISHED on
 * both sides. The PSP is freed again. */
DAT_RETURN h_connect(struct h_pair* p, DAT_EP_HANDLE sep, DAT_EP_HANDLE cep);
/* Disconnects `ep` gracefully and waits for DISCONNECTED on both connect EVDs. */
DAT_RETURN h_disconnect(struct h_pair* p, DAT_EP_HANDLE initiator, struct h_side* init_side,
                        DAT_EP_HANDLE other, struct h_side* other_side);

/* Posts a send of `len` bytes at `off` of `m` on `ep` and waits for its completion. */
DAT_RETURN h_send(struct h_side* s, DAT_EP_HANDLE ep, const struct h_mem* m, DAT_VLEN off,
                  DAT_VLEN len);
/* Posts a send without waiting (its completion is reaped by h_reap_sends). */
DAT_RETURN h_post_send(DAT_EP_HANDLE ep, const struct h_mem* m, DAT_VLEN off, DAT_VLEN len,
                       uint64_t cookie);
/* Reaps `n` successful send completions of side `s`. */
DAT_RETURN h_reap_sends(struct h_side* s, int n);

/* ---- SRQ ------------------------------------------------------------------------------ */

DAT_RETURN h_srq(struct h_side* s, int max_recv, int iov, int lw, DAT_SRQ_HANDLE* srq);
/* A server EP on `srq` connected to a fresh client EP (ordinary receive queue of `recvs`). */
DAT_RETURN h_srq_connect(struct h_pair* p, DAT_SRQ_HANDLE srq, int recvs, DAT_EP_HANDLE* sep,
                         DAT_EP_HANDLE* cep);
/* Posts one buffer of `len` bytes at `off` of `m` on `srq` with `cookie`. */
DAT_RETURN h_srq_post(DAT_SRQ_HANDLE srq, const struct h_mem* m, DAT_VLEN off, DAT_VLEN len,
                      uint64_t cookie);
/* The SRQ's available (on the SRQ) and outstanding (posted, not yet reaped) counts. */
DAT_RETURN h_srq_counts(DAT_SRQ_HANDLE srq, DAT_COUNT* available, DAT_COUNT* outstanding);
/* Waits until the `len` bytes at `at` equal `want` (what the peer's RDMA Write placed: on
 * iWARP the write completes before the peer placed it); 1 when they did within H_WAIT_US. */
int h_wait_bytes(const unsigned char* at, const unsigned char* want, size_t len);
/* Samples the counts until at most `want` buffers are available, that is until the EPs took
 * the others for messages that arrived (bounded by H_WAIT_US); the last sample is returned. */
DAT_RETURN h_srq_wait_available(DAT_SRQ_HANDLE srq, DAT_COUNT want, DAT_COUNT* available,
                                DAT_COUNT* outstanding);

#endif
