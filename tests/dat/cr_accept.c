/* dat_cr_accept (DAT 1.2 page): private data to the active side (size checked); the EP
 * given or the one the CR carries (PSP with DAT_PSP_PROVIDER_FLAG, RSP); an EP that does not
 * satisfy the request fails with no effect on the EP, the pending CR, its private data or the
 * remote EP, so that the CR can then be accepted with another EP or rejected; a successful
 * accept destroys the CR; ESTABLISHED on the EP's connect EVD; a failed establishment
 * (ACCEPT_COMPLETION_ERROR) leaves the EP Disconnected with its receives flushed. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define PD_REQ 32
#define PD_REP 40

static void pattern(unsigned char* b, int n, int seed) {
    for (int i = 0; i < n; ++i) b[i] = (unsigned char)(seed + 3 * i);
}
static int is_pattern(const unsigned char* b, int n, int seed) {
    for (int i = 0; i < n; ++i)
        if (b[i] != (unsigned char)(seed + 3 * i)) return 0;
    return 1;
}

/* Starts a connection from client EP `cep` to a PSP (or RSP) at `port` with request
 * private data; returns the CR of the server's CR event. */
static DAT_RETURN request(struct h_pair* p, DAT_EP_HANDLE cep, DAT_CONN_QUAL port,
                          DAT_CR_HANDLE* cr) {
    unsigned char pd[PD_REQ];
    pattern(pd, PD_REQ, 7);
    DAT_RETURN ret = dat_ep_connect(cep, p->srv.ia_attr.ia_address_ptr, port, H_WAIT_US, PD_REQ, pd,
                                    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
    if (ret != DAT_SUCCESS) return ret;
    DAT_EVENT ev;
    ret = h_expect_event(p->srv.cr_evd, DAT_CONNECTION_REQUEST_EVENT, NULL, &ev);
    if (ret == DAT_SUCCESS) *cr = ev.event_data.cr_arrival_event_data.cr_handle;
    return ret;
}

static DAT_EP_STATE ep_state(DAT_EP_HANDLE ep) {
    DAT_EP_STATE st = (DAT_EP_STATE)-1;
    DAT_BOOLEAN recv_idle, req_idle;
    if (dat_ep_get_status(ep, &st, &recv_idle, &req_idle) != DAT_SUCCESS) return (DAT_EP_STATE)-1;
    return st;
}

/* The request's private data reaches the CR, the accept's reaches the active side's
 * ESTABLISHED event; ESTABLISHED on the accepting EP's connect EVD, naming that EP. */
static void private_data_delivered_established(struct h_pair* p) {
    DAT_EP_HANDLE sep, cep;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
               "dat_psp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    DAT_CR_PARAM cp;
    REQUIRE_OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), "dat_cr_query");
    EXPECT(cp.private_data_size >= PD_REQ, "CR private data size %d", cp.private_data_size);
    EXPECT(cp.private_data != NULL && is_pattern(cp.private_data, PD_REQ, 7),
           "CR private data differs");
    unsigned char rep[PD_REP];
    pattern(rep, PD_REP, 99);
    REQUIRE_OK(dat_cr_accept(cr, sep, PD_REP, rep), "dat_cr_accept");
    DAT_EVENT ev;
    REQUIRE_OK(h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, sep, &ev),
               "ESTABLISHED for the accepting EP on its connect EVD");
    REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, &ev),
               "ESTABLISHED on the active side");
    const DAT_CONNECTION_EVENT_DATA* c = &ev.event_data.connect_event_data;
    EXPECT(c->private_data_size >= PD_REP, "active side got %d bytes of private data",
           c->private_data_size);
    EXPECT(c->private_data != NULL && is_pattern(c->private_data, PD_REP, 99),
           "active side's private data differs from the accept's");
    EXPECT(ep_state(sep) == DAT_EP_STATE_CONNECTED, "accepting EP in state %d", ep_state(sep));
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_psp_free(psp);
    dat_ep_free(cep);
    dat_ep_free(sep);
}

/* More private data than max_private_data_size: DAT_INVALID_PARAMETER, and the CR is intact:
 * accepted next, the active side's first event is ESTABLISHED with the second accept's data. */
static void private_data_over_max_invalid_parameter(struct h_pair* p) {
    DAT_EP_HANDLE sep, cep;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    const DAT_COUNT max = p->srv.prov_attr.max_private_data_size;
    REQUIRE(max > 0 && max < 65536, "max_private_data_size %d", max);
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
               "dat_psp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    static unsigned char big[65536 + 1];
    pattern(big, max + 1, 5);
    EXPECT_TYPE(dat_cr_accept(cr, sep, max + 1, big), DAT_INVALID_PARAMETER,
                "accept with max+1 bytes");
    EXPECT(ep_state(sep) == DAT_EP_STATE_UNCONNECTED, "EP in state %d after the refused accept",
           ep_state(sep));
    REQUIRE_OK(dat_cr_accept(cr, sep, max, big), "accept with max bytes after the refused one");
    DAT_EVENT ev;
    REQUIRE_OK(h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, sep, NULL),
               "ESTABLISHED (server)");
    REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, &ev),
               "first event on the active side");
    EXPECT(ev.event_data.connect_event_data.private_data_size >= max &&
               is_pattern(ev.event_data.connect_event_data.private_data, max, 5),
           "active side's private data is not the second accept's %d bytes", max);
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_psp_free(psp);
    dat_ep_free(cep);
    dat_ep_free(sep);
}

/* A PSP with DAT_PSP_PROVIDER_FLAG: the CR carries the provider's EP; accepting with
 * DAT_HANDLE_NULL connects that EP. */
static void ep_from_cr_psp_provider_flag(struct h_pair* p) {
    DAT_EP_HANDLE cep;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_PROVIDER_FLAG, &psp),
               "dat_psp_create(DAT_PSP_PROVIDER_FLAG)");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    DAT_CR_PARAM cp;
    REQUIRE_OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), "dat_cr_query");
    const DAT_EP_HANDLE pep = cp.local_ep_handle;
    REQUIRE(pep != DAT_HANDLE_NULL, "the CR of a provider-flag PSP carries no EP");
    /* The provider's EP may come without EVDs: give it the server's. */
    DAT_EP_PARAM prm;
    REQUIRE_OK(dat_ep_query(pep, DAT_EP_FIELD_ALL, &prm), "dat_ep_query (provider's EP)");
    if (prm.connect_evd_handle == DAT_HANDLE_NULL || prm.recv_evd_handle == DAT_HANDLE_NULL ||
        prm.request_evd_handle == DAT_HANDLE_NULL) {
        prm.connect_evd_handle = p->srv.conn_evd;
        prm.recv_evd_handle = p->srv.rcv_evd;
        prm.request_evd_handle = p->srv.req_evd;
        REQUIRE_OK(dat_ep_modify(pep,
                                 DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE |
                                     DAT_EP_FIELD_CONNECT_EVD_HANDLE,
                                 &prm),
                   "dat_ep_modify (provider's EP's EVDs)");
    }
    REQUIRE_OK(dat_ep_query(pep, DAT_EP_FIELD_CONNECT_EVD_HANDLE, &prm), "dat_ep_query");
    REQUIRE_OK(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL), "dat_cr_accept(DAT_HANDLE_NULL)");
    REQUIRE_OK(h_expect_event(prm.connect_evd_handle, DAT_CONNECTION_EVENT_ESTABLISHED, pep, NULL),
               "ESTABLISHED for the provider's EP");
    REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, NULL),
               "ESTABLISHED (client)");
    h_disconnect(p, cep, &p->cli, pep, &p->srv);
    dat_psp_free(psp);
    dat_ep_free(cep);
    dat_ep_free(pep);
}

/* An RSP: the CR carries the RSP's EP; accepting with DAT_HANDLE_NULL connects it. */
static void ep_from_cr_rsp(struct h_pair* p) {
    DAT_EP_HANDLE sep, cep;
    DAT_RSP_HANDLE rsp;
    DAT_CR_HANDLE cr;
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_rsp_create(p->srv.ia, port, sep, p->srv.cr_evd, &rsp), "dat_rsp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    DAT_CR_PARAM cp;
    REQUIRE_OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), "dat_cr_query");
    EXPECT(cp.local_ep_handle == sep, "the RSP's CR carries another EP");
    REQUIRE_OK(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL), "dat_cr_accept(DAT_HANDLE_NULL)");
    REQUIRE_OK(h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, sep, NULL),
               "ESTABLISHED for the RSP's EP");
    REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, NULL),
               "ESTABLISHED (client)");
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_rsp_free(rsp); /* may already be gone with its connection */
    dat_ep_free(cep);
    dat_ep_free(sep);
}

/* The client asks for 4 outgoing RDMA Reads; EP `weak` accepts 1 incoming. Accepting with
 * `weak` fails (DAT_INVALID_PARAMETER) and changes nothing: `weak` is still unconnected with
 * its posted receive, the CR answers queries with the same private data, the client has had
 * no event. Then `accept_after` decides: 1 accepts with a strong EP (the client's first event
 * is ESTABLISHED, an RDMA Read works), 0 rejects (the client's first event is
 * PEER_REJECTED). `weak` is then connected elsewhere and receives into its buffer. */
static void read_limit_fails_without_effect(struct h_pair* p, int accept_after) {
    DAT_EP_HANDLE weak, strong, cep, cep2;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    struct h_mem rm, sm;
    DAT_EP_ATTR a_weak = h_ep_attr(4, 4, 1, 1, 1);
    DAT_EP_ATTR a_strong = h_ep_attr(4, 4, 1, 4, 4);
    DAT_EP_ATTR a_cli = h_ep_attr(4, 8, 1, 4, 4);
    REQUIRE_OK(h_ep(&p->srv, &a_weak, &weak), "dat_ep_create (weak)");
    REQUIRE_OK(h_ep(&p->srv, &a_strong, &strong), "dat_ep_create (strong)");
    REQUIRE_OK(h_ep(&p->cli, &a_cli, &cep), "dat_ep_create (client)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (server)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (client)");
    DAT_LMR_TRIPLET iov = h_iov(&rm, 0, 64);
    DAT_DTO_COOKIE ck = {.as_64 = 0x3ea4};
    REQUIRE_OK(dat_ep_post_recv(weak, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG),
               "post_recv (weak)");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
               "dat_psp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    unsigned char rep[PD_REP];
    pattern(rep, PD_REP, 44);
    const DAT_RETURN ret = dat_cr_accept(cr, weak, PD_REP, rep);
    EXPECT_TYPE(ret, DAT_INVALID_PARAMETER, "accept with max_rdma_read_in 1 < the request's 4");
    if (ret == DAT_SUCCESS) {
        h_fail(__LINE__, "an EP with max_rdma_read_in 1 accepted a request for 4 RDMA Reads");
        return;
    }
    EXPECT(ep_state(weak) == DAT_EP_STATE_UNCONNECTED,
           "weak EP in state %d after the failed accept", ep_state(weak));
    EXPECT(h_empty(p->srv.rcv_evd), "the failed accept completed a posted receive");
    DAT_CR_PARAM cp;
    REQUIRE_OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), "dat_cr_query after the failed accept");
    EXPECT(cp.private_data != NULL && is_pattern(cp.private_data, PD_REQ, 7),
           "CR private data changed");
    EXPECT(h_empty(p->srv.conn_evd),
           "an event on the server's connect EVD after the failed accept");
    DAT_EVENT ev;
    if (accept_after) {
        REQUIRE_OK(dat_cr_accept(cr, strong, PD_REP, rep), "accept with a satisfying EP");
        REQUIRE_OK(h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, strong, NULL),
                   "ESTABLISHED (strong)");
        REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, &ev),
                   "client's first event");
        EXPECT(is_pattern(ev.event_data.connect_event_data.private_data, PD_REP, 44),
               "client's private data");
        /* 4 RDMA Reads in flight at once from the client. */
        memset(rm.buf + 1024, 0x5a, 1024);
        DAT_RMR_TRIPLET remote;
        remote.rmr_context = rm.rmr_ctx;
        remote.virtual_address = (DAT_VADDR)(uintptr_t)(rm.buf + 1024);
        remote.segment_length = 256;
        for (int i = 0; i < 4; ++i) {
            DAT_LMR_TRIPLET l = h_iov(&sm, (DAT_VLEN)i * 256, 256);
            DAT_DTO_COOKIE rk = {.as_64 = (uint64_t)i};
            remote.virtual_address = (DAT_VADDR)(uintptr_t)(rm.buf + 1024 + i * 256);
            REQUIRE_OK(dat_ep_post_rdma_read(cep, 1, &l, rk, &remote, DAT_COMPLETION_DEFAULT_FLAG),
                       "dat_ep_post_rdma_read");
        }
        REQUIRE_OK(h_reap_sends(&p->cli, 4), "RDMA Read completions");
        EXPECT(sm.buf[0] == 0x5a && sm.buf[1023] == 0x5a, "RDMA Read data");
        h_disconnect(p, cep, &p->cli, strong, &p->srv);
    } else {
        REQUIRE_OK(dat_cr_reject(cr, 0, NULL), "dat_cr_reject after the failed accept");
        REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_PEER_REJECTED, cep, &ev),
                   "client's first event (PEER_REJECTED)");
    }
    /* The weak EP is untouched: it connects to a client asking for 1 Read and receives into
     * the buffer posted before the failed accept. */
    DAT_EP_ATTR a_cli2 = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->cli, &a_cli2, &cep2), "dat_ep_create (client 2)");
    REQUIRE_OK(h_connect(p, weak, cep2), "connect the weak EP afterwards");
    REQUIRE_OK(h_send(&p->cli, cep2, &sm, 0, 8), "send to the weak EP");
    REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive on the weak EP");
    EXPECT(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS &&
               ev.event_data.dto_completion_event_data.user_cookie.as_64 == 0x3ea4,
           "the receive posted before the failed accept: status %d cookie 0x%llx",
           ev.event_data.dto_completion_event_data.status,
           (unsigned long long)ev.event_data.dto_completion_event_data.user_cookie.as_64);
    h_disconnect(p, cep2, &p->cli, weak, &p->srv);
    dat_psp_free(psp);
    dat_ep_free(cep2);
    dat_ep_free(cep);
    dat_ep_free(strong);
    dat_ep_free(weak);
    h_mem_free(&rm);
    h_mem_free(&sm);
}
static void read_limit_then_other_ep(struct h_pair* p) {
    read_limit_fails_without_effect(p, 1);
}
static void read_limit_then_reject(struct h_pair* p) {
    read_limit_fails_without_effect(p, 0);
}

/* After a successful accept the CR is gone: every use of its handle fails. */
static void accept_destroys_cr(struct h_pair* p) {
    DAT_EP_HANDLE sep, cep, other;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->srv, &a, &other), "dat_ep_create (server 2)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
               "dat_psp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    REQUIRE_OK(dat_cr_accept(cr, sep, 0, NULL), "dat_cr_accept");
    REQUIRE_OK(h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, sep, NULL),
               "ESTABLISHED (server)");
    REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, NULL),
               "ESTABLISHED (client)");
    DAT_CR_PARAM cp;
    EXPECT_TYPE(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_INVALID_HANDLE,
                "dat_cr_query on the accepted CR");
    EXPECT_TYPE(dat_cr_accept(cr, other, 0, NULL), DAT_INVALID_HANDLE,
                "dat_cr_accept on the accepted CR");
    EXPECT_TYPE(dat_cr_reject(cr, 0, NULL), DAT_INVALID_HANDLE, "dat_cr_reject on the accepted CR");
    EXPECT(ep_state(other) == DAT_EP_STATE_UNCONNECTED, "the second EP changed state");
    EXPECT(ep_state(sep) == DAT_EP_STATE_CONNECTED, "the connection changed state");
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_psp_free(psp);
    dat_ep_free(cep);
    dat_ep_free(other);
    dat_ep_free(sep);
}

/* The active side goes away (its EP freed) after its request arrived and before the accept:
 * the accept cannot complete. Either dat_cr_accept refuses at once, or it is accepted and
 * ACCEPT_COMPLETION_ERROR follows on the EP's connect EVD, the EP is Disconnected and its
 * posted receives are flushed to its recv_evd. */
#define GONE_WAIT_US (120 * 1000 * 1000)
static void completion_error_flushes_receives(struct h_pair* p) {
    DAT_EP_HANDLE sep, cep;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    struct h_mem rm;
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr");
    for (int i = 0; i < 2; ++i) {
        DAT_LMR_TRIPLET iov = h_iov(&rm, (DAT_VLEN)i * 64, 64);
        DAT_DTO_COOKIE ck = {.as_64 = 0xf1u + (uint64_t)i};
        REQUIRE_OK(dat_ep_post_recv(sep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG), "post_recv");
    }
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
               "dat_psp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    REQUIRE_OK(dat_ep_free(cep), "dat_ep_free (active side, connection pending)");
    const DAT_RETURN ret = dat_cr_accept(cr, sep, 0, NULL);
    if (ret != DAT_SUCCESS) {
        printf("note: dat_cr_accept refused at once: %s (ACCEPT_COMPLETION_ERROR not provoked)\n",
               h_str(ret));
        EXPECT(ep_state(sep) == DAT_EP_STATE_UNCONNECTED, "EP in state %d after the refused accept",
               ep_state(sep));
        EXPECT(h_empty(p->srv.rcv_evd), "a refused accept completed the posted receives");
    } else {
        DAT_EVENT ev;
        DAT_COUNT nmore;
        REQUIRE_OK(dat_evd_wait(p->srv.conn_evd, GONE_WAIT_US, 1, &ev, &nmore), "connection event");
        /* iWARP's passive side is established once its MPA reply is out (as the kernel's
         * iWARP CM has it: no RTU to wait for), so when the active side's reset comes after
         * that, the accept completed and the connection then ends at once. */
        if (p->iwarp && ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED) {
            printf("note: the accept completed before the active side's reset (iWARP)\n");
            REQUIRE_OK(dat_evd_wait(p->srv.conn_evd, GONE_WAIT_US, 1, &ev, &nmore),
                       "the connection's end");
            EXPECT(ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED ||
                       ev.event_number == DAT_CONNECTION_EVENT_BROKEN,
                   "got %s after ESTABLISHED, want the connection's end",
                   h_event_str(ev.event_number));
        } else {
            EXPECT(ev.event_number == DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR,
                   "got %s, want DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR",
                   h_event_str(ev.event_number));
        }
        EXPECT(ep_state(sep) == DAT_EP_STATE_DISCONNECTED, "EP in state %d, want DISCONNECTED",
               ep_state(sep));
        for (int i = 0; i < 2; ++i) {
            REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "flushed receive");
            EXPECT(ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED,
                   "posted receive ended with status %d, want DAT_DTO_ERR_FLUSHED",
                   ev.event_data.dto_completion_event_data.status);
        }
    }
    dat_psp_free(psp);
    dat_ep_free(sep);
    h_mem_free(&rm);
}

/* The page lists DAT_SUCCESS, DAT_INVALID_HANDLE and DAT_INVALID_PARAMETER, no
 * DAT_INVALID_STATE: an EP that is already connected cannot take the request, a combination
 * of parameters the page calls invalid (DAT_INVALID_PARAMETER), and the CR, its private data
 * and the connected EP are as they were: the CR is then accepted with an unconnected EP, and
 * the first connection still carries messages. */
static void connected_ep_invalid_parameter(struct h_pair* p) {
    DAT_EP_HANDLE busy, sep, bcep, cep;
    DAT_PSP_HANDLE psp;
    DAT_CR_HANDLE cr;
    struct h_mem rm, sm;
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &busy), "dat_ep_create (connected server EP)");
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &bcep), "dat_ep_create (first client)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (server)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (client)");
    REQUIRE_OK(h_connect(p, busy, bcep), "first connection");
    const DAT_CONN_QUAL port = h_port();
    REQUIRE_OK(dat_psp_create(p->srv.ia, port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
               "dat_psp_create");
    REQUIRE_OK(request(p, cep, port, &cr), "connection request");
    EXPECT_TYPE(dat_cr_accept(cr, busy, 0, NULL), DAT_INVALID_PARAMETER,
                "accept with an EP already connected");
    EXPECT(ep_state(busy) == DAT_EP_STATE_CONNECTED, "the connected EP in state %d after it",
           ep_state(busy));
    DAT_CR_PARAM cp;
    REQUIRE_OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), "dat_cr_query after the refused accept");
    EXPECT(cp.private_data != NULL && is_pattern(cp.private_data, PD_REQ, 7),
           "CR private data changed");
    REQUIRE_OK(dat_cr_accept(cr, sep, 0, NULL), "accept with an unconnected EP");
    REQUIRE_OK(h_expect_event(p->srv.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, sep, NULL),
               "ESTABLISHED (server)");
    REQUIRE_OK(h_expect_event(p->cli.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, cep, NULL),
               "ESTABLISHED (client)");
    DAT_LMR_TRIPLET iov = h_iov(&rm, 0, 64);
    DAT_DTO_COOKIE ck = {.as_64 = 0xb5};
    REQUIRE_OK(dat_ep_post_recv(busy, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG),
               "post_recv (first connection)");
    REQUIRE_OK(h_send(&p->cli, bcep, &sm, 0, 16), "send on the first connection");
    DAT_EVENT ev;
    REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive on the first connection");
    EXPECT(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS &&
               ev.event_data.dto_completion_event_data.user_cookie.as_64 == 0xb5,
           "receive on the first connection: status %d",
           ev.event_data.dto_completion_event_data.status);
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    h_disconnect(p, bcep, &p->cli, busy, &p->srv);
    dat_psp_free(psp);
    dat_ep_free(cep);
    dat_ep_free(bcep);
    dat_ep_free(sep);
    dat_ep_free(busy);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

int main(int argc, char** argv) {
    struct h_pair p;
    h_init(argc, argv, &p);
    H_RULE("cr_accept_private_data_delivered_established_on_connect_evd",
           private_data_delivered_established, &p);
    H_RULE("cr_accept_private_data_over_max_invalid_parameter",
           private_data_over_max_invalid_parameter, &p);
    H_RULE("cr_accept_ep_from_cr_psp_provider_flag", ep_from_cr_psp_provider_flag, &p);
    H_RULE("cr_accept_ep_from_cr_rsp", ep_from_cr_rsp, &p);
    H_RULE("cr_accept_unsatisfying_ep_fails_without_effect_then_other_ep", read_limit_then_other_ep,
           &p);
    H_RULE("cr_accept_unsatisfying_ep_fails_without_effect_then_reject", read_limit_then_reject,
           &p);
    H_RULE("cr_accept_destroys_cr", accept_destroys_cr, &p);
    H_RULE("cr_accept_completion_error_flushes_receives", completion_error_flushes_receives, &p);
    H_RULE("cr_accept_connected_ep_invalid_parameter", connected_ep_invalid_parameter, &p);
    return h_finish(&p);
}
