/* The DAT rule tests' harness (see harness.h). */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char* g_only;    /* -r: run this rule only */
static int g_list;            /* -l: print the rules' names, run nothing */
static DAT_CONN_QUAL g_port;  /* -p: the next connection qualifier */
static int g_rules, g_failed; /* rules run, rules failed */
static char g_why[512];       /* the current rule's first failure */
static int g_rule_failed;

void h_fail(int line, const char* fmt, ...) {
    if (g_rule_failed++) return;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(g_why, sizeof g_why, "line %d: ", line);
    vsnprintf(g_why + n, sizeof g_why - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Empties the EVDs of a side (what an earlier rule left, e.g. after it failed half-way),
 * so that rules do not see each other's events. */
static void drain(struct h_side* s, const char* rule) {
    const DAT_EVD_HANDLE evds[] = {s->cr_evd, s->conn_evd, s->req_evd, s->rcv_evd, s->async_evd};
    for (size_t i = 0; i < sizeof evds / sizeof evds[0]; ++i) {
        DAT_EVENT ev;
        while (dat_evd_dequeue(evds[i], &ev) == DAT_SUCCESS)
            fprintf(stderr, "note: before %s: %s left on %s's EVD %zu\n", rule,
                    h_event_str(ev.event_number), s->name, i);
    }
}

void h_run_rule(const char* name, void (*fn)(struct h_pair*), struct h_pair* pair) {
    if (g_list) {
        printf("%s\n", name);
        return;
    }
    if (g_only != NULL && strcmp(g_only, name) != 0) return;
    drain(&pair->srv, name);
    drain(&pair->cli, name);
    g_rule_failed = 0;
    g_why[0] = '\0';
    fn(pair);
    ++g_rules;
    if (g_rule_failed) {
        ++g_failed;
        printf("FAIL %s: %s\n", name, g_why);
    } else {
        printf("PASS %s\n", name);
    }
    fflush(stdout);
}

const char* h_str(DAT_RETURN ret) {
    static char buf[4][160];
    static int next;
    char* b = buf[next++ % 4];
    const char *major = "?", *minor = "";
    if (dat_strerror(ret, &major, &minor) != DAT_SUCCESS) major = "unknown";
    if (minor != NULL && minor[0] != '\0' && strcmp(minor, "DAT_NO_SUBTYPE") != 0)
        snprintf(b, sizeof buf[0], "%s/%s (0x%x)", major, minor, (unsigned)ret);
    else
        snprintf(b, sizeof buf[0], "%s (0x%x)", major, (unsigned)ret);
    return b;
}

const char* h_event_str(DAT_EVENT_NUMBER ev) {
    static const struct {
        DAT_EVENT_NUMBER n;
        const char* s;
    } names[] = {
#define N(x) {x, #x}
        N(DAT_DTO_COMPLETION_EVENT),
        N(DAT_RMR_BIND_COMPLETION_EVENT),
        N(DAT_CONNECTION_REQUEST_EVENT),
        N(DAT_CONNECTION_EVENT_ESTABLISHED),
        N(DAT_CONNECTION_EVENT_PEER_REJECTED),
        N(DAT_CONNECTION_EVENT_NON_PEER_REJECTED),
        N(DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR),
        N(DAT_CONNECTION_EVENT_DISCONNECTED),
        N(DAT_CONNECTION_EVENT_BROKEN),
        N(DAT_CONNECTION_EVENT_TIMED_OUT),
        N(DAT_CONNECTION_EVENT_UNREACHABLE),
        N(DAT_ASYNC_ERROR_EVD_OVERFLOW),
        N(DAT_ASYNC_ERROR_IA_CATASTROPHIC),
        N(DAT_ASYNC_ERROR_EP_BROKEN),
        N(DAT_ASYNC_ERROR_TIMED_OUT),
        N(DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR),
        N(DAT_SOFTWARE_EVENT),
#undef N
    };
    static char other[32];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (names[i].n == ev) return names[i].s;
    snprintf(other, sizeof other, "event 0x%x", (unsigned)ev);
    return other;
}

static void die(const char* what, DAT_RETURN ret) {
    printf("FAIL setup: %s: %s\n", what, h_str(ret));
    exit(2);
}

static void open_side(struct h_side* s) {
    DAT_RETURN ret;
    s->async_evd = DAT_HANDLE_NULL;
    if ((ret = dat_ia_open(s->name, H_QLEN, &s->async_evd, &s->ia)) != DAT_SUCCESS)
        die(s->name, ret);
    if ((ret = dat_ia_query(s->ia, &s->async_evd, DAT_IA_FIELD_ALL, &s->ia_attr,
                            DAT_PROVIDER_FIELD_ALL, &s->prov_attr)) != DAT_SUCCESS)
        die("dat_ia_query", ret);
    if ((ret = dat_pz_create(s->ia, &s->pz)) != DAT_SUCCESS) die("dat_pz_create", ret);
    if ((ret = dat_evd_create(s->ia, H_QLEN, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr_evd)) !=
        DAT_SUCCESS)
        die("dat_evd_create(CR)", ret);
    if ((ret = dat_evd_create(s->ia, H_QLEN, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
                              &s->conn_evd)) != DAT_SUCCESS)
        die("dat_evd_create(CONNECTION)", ret);
    if ((ret = dat_evd_create(s->ia, 4 * H_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req_evd)) !=
        DAT_SUCCESS)
        die("dat_evd_create(DTO request)", ret);
    if ((ret = dat_evd_create(s->ia, 4 * H_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv_evd)) !=
        DAT_SUCCESS)
        die("dat_evd_create(DTO recv)", ret);
}

#define USAGE "usage: %s -a SERVER_IA -b CLIENT_IA -p BASE_PORT [-t roce|iwarp] [-r RULE] | -l\n"

void h_init(int argc, char** argv, struct h_pair* p) {
    memset(p, 0, sizeof *p);
    int c;
    long port = 0;
    while ((c = getopt(argc, argv, "a:b:p:r:t:l")) != -1) {
        switch (c) {
            case 'a':
                p->srv.name = optarg;
                break;
            case 'b':
                p->cli.name = optarg;
                break;
            case 'p':
                port = strtol(optarg, NULL, 0);
                break;
            case 'r':
                g_only = optarg;
                break;
            case 't':
                if (strcmp(optarg, "iwarp") == 0) {
                    p->iwarp = 1;
                } else if (strcmp(optarg, "roce") != 0) {
                    fprintf(stderr, "%s: -t takes roce or iwarp, not '%s'\n", argv[0], optarg);
                    exit(2);
                }
                break;
            case 'l':
                g_list = 1;
                break;
            default:
                fprintf(stderr, USAGE, argv[0]);
                exit(2);
        }
    }
    if (g_list) return;
    if (p->srv.name == NULL || p->cli.name == NULL || port <= 0) {
        fprintf(stderr, USAGE, argv[0]);
        exit(2);
    }
    g_port = (DAT_CONN_QUAL)port;
    setvbuf(stdout, NULL, _IOLBF, 0);
    open_side(&p->srv);
    open_side(&p->cli);
}

static void close_side(struct h_side* s) {
    /* Abrupt close frees whatever a failed rule left behind. */
    DAT_RETURN ret = dat_ia_close(s->ia, DAT_CLOSE_ABRUPT_FLAG);
    if (ret != DAT_SUCCESS) printf("note: dat_ia_close(%s): %s\n", s->name, h_str(ret));
}

int h_finish(struct h_pair* p) {
    if (g_list) return 0;
    close_side(&p->cli);
    close_side(&p->srv);
    if (g_only != NULL && g_rules == 0) {
        printf("FAIL setup: no rule named %s\n", g_only);
        return 2;
    }
    return g_failed ? 1 : 0;
}

DAT_CONN_QUAL h_port(void) {
    return g_port++;
}

DAT_EP_ATTR h_ep_attr(int recvs, int reqs, int iov, int rd_in, int rd_out) {
    DAT_EP_ATTR a;
    memset(&a, 0, sizeof a);
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = 1 << 20;
    a.max_rdma_size = 1 << 20;
    a.qos = DAT_QOS_BEST_EFFORT;
    a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.max_recv_dtos = recvs;
    a.max_request_dtos = reqs;
    a.max_recv_iov = iov;
    a.max_request_iov = iov;
    a.max_rdma_read_in = rd_in;
    a.max_rdma_read_out = rd_out;
    a.srq_soft_hw = DAT_HW_DEFAULT;
    a.max_rdma_read_iov = 1;
    a.max_rdma_write_iov = iov;
    return a;
}

DAT_RETURN h_ep(struct h_side* s, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* ep) {
    return dat_ep_create(s->ia, s->pz, s->rcv_evd, s->req_evd, s->conn_evd, attr, ep);
}

DAT_RETURN h_mem(struct h_side* s, DAT_PZ_HANDLE pz, DAT_VLEN len, DAT_MEM_PRIV_FLAGS priv,
                 struct h_mem* m) {
    memset(m, 0, sizeof *m);
    if (posix_memalign((void**)&m->buf, 4096, len) != 0) return DAT_INSUFFICIENT_RESOURCES;
    memset(m->buf, 0, len);
    m->len = len;
    DAT_REGION_DESCRIPTION region;
    memset(&region, 0, sizeof region);
    region.for_va = m->buf;
    DAT_VLEN reg_len;
    DAT_VADDR reg_addr;
    DAT_RETURN ret = dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, len,
                                    pz != DAT_HANDLE_NULL ? pz : s->pz, priv, DAT_VA_TYPE_VA,
                                    &m->lmr, &m->lmr_ctx, &m->rmr_ctx, &reg_len, &reg_addr);
    if (ret != DAT_SUCCESS) {
        free(m->buf);
        m->buf = NULL;
    }
    return ret;
}

void h_mem_free(struct h_mem* m) {
    if (m->lmr != DAT_HANDLE_NULL) dat_lmr_free(m->lmr);
    free(m->buf);
    memset(m, 0, sizeof *m);
}

DAT_LMR_TRIPLET h_iov(const struct h_mem* m, DAT_VLEN off, DAT_VLEN len) {
    DAT_LMR_TRIPLET t;
    t.lmr_context = m->lmr_ctx;
    t.virtual_address = (DAT_VADDR)(uintptr_t)(m->buf + off);
    t.segment_length = len;
    return t;
}

DAT_RETURN h_wait(DAT_EVD_HANDLE evd, DAT_EVENT* ev) {
    DAT_COUNT nmore;
    return dat_evd_wait(evd, H_WAIT_US, 1, ev, &nmore);
}

DAT_RETURN h_expect_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, DAT_EP_HANDLE ep,
                          DAT_EVENT* ev) {
    DAT_EVENT local;
    if (ev == NULL) ev = &local;
    DAT_RETURN ret = h_wait(evd, ev);
    if (ret != DAT_SUCCESS) return ret;
    if (ev->event_number != want) {
        fprintf(stderr, "note: waited for %s, got %s\n", h_event_str(want),
                h_event_str(ev->event_number));
        return (DAT_RETURN)DAT_INVALID_STATE;
    }
    if (ep != NULL && (want & 0xF000) == 0x4000 &&
        ev->event_data.connect_event_data.ep_handle != ep)
        return (DAT_RETURN)DAT_INVALID_HANDLE;
    return DAT_SUCCESS;
}

int h_empty(DAT_EVD_HANDLE evd) {
    DAT_EVENT ev;
    return DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)) == DAT_QUEUE_EMPTY;
}

DAT_RETURN h_connect(struct h_pair* p, DAT_EP_HANDLE sep, DAT_EP_HANDLE cep) {
    DAT_PSP_HANDLE psp;
    const DAT_CONN_QUAL port = h_port();
    DAT_RETURN ret = dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp);
    if (ret != DAT_SUCCESS) return ret;
    ret = dat_ep_connect(cep, p->srv.ia_attr.ia_address_ptr, port, H_WAIT_US, 0, NULL,
                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
    DAT_EVENT ev;
    if (ret == DAT_SUCCESS)
        ret = h_expect_event(p->srv.cr_evd, DAT_CONNECTION_REQUEST_EVENT, NULL, &ev);
    if (ret == DAT_SUCCESS)
        ret = dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, sep, 0, NULL);
    if (ret == DAT_SUCCESS)
        ret = h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, sep, NULL);
    if (ret == DAT_SUCCESS)
        ret = h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, NULL);
    dat_psp_free(psp);
    return ret;
}

DAT_RETURN h_disconnect(struct h_pair* p, DAT_EP_HANDLE initiator, struct h_side* init_side,
                        DAT_EP_HANDLE other, struct h_side* other_side) {
    (void)p;
    DAT_RETURN ret = dat_ep_disconnect(initiator, DAT_CLOSE_GRACEFUL_FLAG);
    if (ret == DAT_SUCCESS)
        ret =
            h_expect_event(init_side->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, initiator, NULL);
    if (ret == DAT_SUCCESS)
        ret = h_expect_event(other_side->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, other, NULL);
    return ret;
}

DAT_RETURN h_post_send(DAT_EP_HANDLE ep, const struct h_mem* m, DAT_VLEN off, DAT_VLEN len,
                       uint64_t cookie) {
    DAT_LMR_TRIPLET iov = h_iov(m, off, len);
    DAT_DTO_COOKIE ck;
    ck.as_64 = cookie;
    return dat_ep_post_send(ep, len > 0 ? 1 : 0, len > 0 ? &iov : NULL, ck,
                            DAT_COMPLETION_DEFAULT_FLAG);
}

DAT_RETURN h_reap_sends(struct h_side* s, int n) {
    for (int i = 0; i < n; ++i) {
        DAT_EVENT ev;
        DAT_RETURN ret = h_expect_event(s->req_evd, DAT_DTO_COMPLETION_EVENT, NULL, &ev);
        if (ret != DAT_SUCCESS) return ret;
        if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
            return (DAT_RETURN)DAT_ABORT;
    }
    return DAT_SUCCESS;
}

DAT_RETURN h_send(struct h_side* s, DAT_EP_HANDLE ep, const struct h_mem* m, DAT_VLEN off,
                  DAT_VLEN len) {
    DAT_RETURN ret = h_post_send(ep, m, off, len, 0x5e7d);
    return ret == DAT_SUCCESS ? h_reap_sends(s, 1) : ret;
}

DAT_RETURN h_srq(struct h_side* s, int max_recv, int iov, int lw, DAT_SRQ_HANDLE* srq) {
    DAT_SRQ_ATTR a;
    a.max_recv_dtos = max_recv;
    a.max_recv_iov = iov;
    a.low_watermark = lw;
    return dat_srq_create(s->ia, s->pz, &a, srq);
}

DAT_RETURN h_srq_connect(struct h_pair* p, DAT_SRQ_HANDLE srq, int recvs, DAT_EP_HANDLE* sep,
                         DAT_EP_HANDLE* cep) {
    DAT_EP_ATTR a = h_ep_attr(recvs, 64, 4, 4, 4);
    DAT_RETURN ret = dat_ep_create_with_srq(p->srv.ia, p->srv.pz, p->srv.rcv_evd, p->srv.req_evd,
                                            p->srv.conn_evd, srq, &a, sep);
    if (ret != DAT_SUCCESS) return ret;
    ret = h_ep(&p->cli, &a, cep);
    if (ret != DAT_SUCCESS) return ret;
    return h_connect(p, *sep, *cep);
}

DAT_RETURN h_srq_post(DAT_SRQ_HANDLE srq, const struct h_mem* m, DAT_VLEN off, DAT_VLEN len,
                      uint64_t cookie) {
    DAT_LMR_TRIPLET iov = h_iov(m, off, len);
    DAT_DTO_COOKIE ck;
    ck.as_64 = cookie;
    return dat_srq_post_recv(srq, 1, &iov, ck);
}

DAT_RETURN h_srq_counts(DAT_SRQ_HANDLE srq, DAT_COUNT* available, DAT_COUNT* outstanding) {
    DAT_SRQ_PARAM prm;
    DAT_RETURN ret = dat_srq_query(
        srq, DAT_SRQ_FIELD_AVAILABLE_DTO_COUNT | DAT_SRQ_FIELD_OUTSTANDING_DTO_COUNT, &prm);
    if (ret == DAT_SUCCESS) {
        if (available) *available = prm.available_dto_count;
        if (outstanding) *outstanding = prm.outstanding_dto_count;
    }
    return ret;
}

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int h_wait_bytes(const unsigned char* at, const unsigned char* want, size_t len) {
    const uint64_t give_up = now_us() + H_WAIT_US;
    while (memcmp(at, want, len) != 0)
        if (now_us() >= give_up) return 0;
    return 1;
}

DAT_RETURN h_srq_wait_available(DAT_SRQ_HANDLE srq, DAT_COUNT want, DAT_COUNT* available,
                                DAT_COUNT* outstanding) {
    const uint64_t give_up = now_us() + H_WAIT_US;
    for (;;) {
        DAT_COUNT avail = 0, outst = 0;
        const DAT_RETURN ret = h_srq_counts(srq, &avail, &outst);
        if (ret != DAT_SUCCESS) return ret;
        if (available) *available = avail;
        if (outstanding) *outstanding = outst;
        if (avail <= want || now_us() >= give_up) return DAT_SUCCESS;
    }
}
