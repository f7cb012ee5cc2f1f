/* dat_srq_post_recv and the SRQ's EPs (DAT 1.2 pages): segments filled in order with at
 * most one partial, zero segments and a NULL IOV for zero-length messages, the cookie
 * returned, valid in every SRQ state, completions in send order per connection, the error
 * codes; only connected EPs take buffers, and a disconnect leaves completed buffers on the
 * EP's recv_evd and untaken ones on the SRQ. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

static int dto_ok(const DAT_EVENT* ev) {
    return ev->event_number == DAT_DTO_COMPLETION_EVENT &&
           ev->event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS;
}

/* A receive of 20 bytes into three 8-byte segments scattered over the LMR (at 64, 0 and
 * 32): 8 + 8 + 4, the third partial, the rest of it untouched. */
static void fills_segments_in_order(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 4, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    memset(rm.buf, 0xee, 128);
    for (int i = 0; i < 20; ++i) sm.buf[i] = (unsigned char)(i + 1);
    DAT_LMR_TRIPLET iov[3] = {h_iov(&rm, 64, 8), h_iov(&rm, 0, 8), h_iov(&rm, 32, 8)};
    DAT_DTO_COOKIE ck = {.as_64 = 0xc0ffee01};
    REQUIRE_OK(dat_srq_post_recv(srq, 3, iov, ck), "dat_srq_post_recv (3 segments)");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 20), "send 20 bytes");
    DAT_EVENT ev;
    REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
    REQUIRE(dto_ok(&ev), "receive completion: %s status %d", h_event_str(ev.event_number),
            ev.event_data.dto_completion_event_data.status);
    const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev.event_data.dto_completion_event_data;
    EXPECT(d->transfered_length == 20, "transfered_length %u, want 20",
           (unsigned)d->transfered_length);
    EXPECT(d->user_cookie.as_64 == 0xc0ffee01, "cookie 0x%llx",
           (unsigned long long)d->user_cookie.as_64);
    EXPECT(d->ep_handle == sep, "completion names another EP");
    for (int i = 0; i < 8; ++i)
        EXPECT(rm.buf[64 + i] == i + 1, "segment 0 byte %d = %d", i, rm.buf[64 + i]);
    for (int i = 0; i < 8; ++i)
        EXPECT(rm.buf[0 + i] == i + 9, "segment 1 byte %d = %d", i, rm.buf[i]);
    for (int i = 0; i < 4; ++i)
        EXPECT(rm.buf[32 + i] == i + 17, "segment 2 byte %d = %d", i, rm.buf[32 + i]);
    for (int i = 4; i < 8; ++i)
        EXPECT(rm.buf[32 + i] == 0xee, "segment 2 byte %d written past the message", i);
    EXPECT(rm.buf[8] == 0xee && rm.buf[40] == 0xee && rm.buf[72] == 0xee,
           "bytes outside the segments written");
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* Zero-length messages land in buffers posted with zero segments and with a NULL IOV. */
static void zero_segments_and_null_iov(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 4, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    DAT_LMR_TRIPLET unused = {0};
    DAT_DTO_COOKIE ck0 = {.as_64 = 0x2e50}, ck1 = {.as_64 = 0x2e51};
    REQUIRE_OK(dat_srq_post_recv(srq, 0, &unused, ck0), "dat_srq_post_recv(0 segments)");
    REQUIRE_OK(dat_srq_post_recv(srq, 0, NULL, ck1), "dat_srq_post_recv(0 segments, NULL IOV)");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 0), "zero-length send 1");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 0), "zero-length send 2");
    for (int i = 0; i < 2; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "receive %d: %s status %d", i, h_event_str(ev.event_number),
                ev.event_data.dto_completion_event_data.status);
        const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev.event_data.dto_completion_event_data;
        EXPECT(d->transfered_length == 0, "receive %d: length %u", i,
               (unsigned)d->transfered_length);
        EXPECT(d->user_cookie.as_64 == (i == 0 ? 0x2e50u : 0x2e51u), "receive %d: cookie 0x%llx", i,
               (unsigned long long)d->user_cookie.as_64);
    }
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&sm);
}

/* Two connections share one SRQ; sends alternate between them; each connection's receives
 * complete in its send order (a sequence number in the payload), every cookie once. */
#define ORDER_MSGS 32
static void completes_in_send_order_per_connection(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep[2], cep[2];
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 2 * ORDER_MSGS, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 2 * ORDER_MSGS * 64, DAT_MEM_PRIV_ALL_FLAG, &rm),
               "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 2 * ORDER_MSGS * 64, DAT_MEM_PRIV_ALL_FLAG, &sm),
               "lmr (send)");
    for (int i = 0; i < 2 * ORDER_MSGS; ++i)
        REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, 1000 + i), "dat_srq_post_recv");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep[0], &cep[0]), "connect 0");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep[1], &cep[1]), "connect 1");
    for (int i = 0; i < ORDER_MSGS; ++i)
        for (int c = 0; c < 2; ++c) {
            unsigned char* m = sm.buf + (i * 2 + c) * 64;
            m[0] = (unsigned char)c;
            m[1] = (unsigned char)i;
            REQUIRE_OK(h_post_send(cep[c], &sm, (DAT_VLEN)(i * 2 + c) * 64, 8, 0), "post send");
        }
    REQUIRE_OK(h_reap_sends(&p->cli, 2 * ORDER_MSGS), "send completions");
    int next[2] = {0, 0};
    int seen[2 * ORDER_MSGS] = {0};
    for (int n = 0; n < 2 * ORDER_MSGS; ++n) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "receive: %s status %d", h_event_str(ev.event_number),
                ev.event_data.dto_completion_event_data.status);
        const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev.event_data.dto_completion_event_data;
        const uint64_t k = d->user_cookie.as_64 - 1000;
        REQUIRE(k < 2 * ORDER_MSGS && !seen[k], "cookie 0x%llx unknown or seen twice",
                (unsigned long long)d->user_cookie.as_64);
        seen[k] = 1;
        const unsigned char* m = rm.buf + k * 64;
        const int c = m[0];
        REQUIRE(c == 0 || c == 1, "payload names connection %d", c);
        EXPECT(d->ep_handle == sep[c], "message of connection %d completed on the other EP", c);
        EXPECT(m[1] == next[c], "connection %d: message %d completed where %d was due", c, m[1],
               next[c]);
        next[c] = m[1] + 1;
    }
    for (int c = 0; c < 2; ++c) {
        h_disconnect(p, cep[c], &p->cli, sep[c], &p->srv);
        dat_ep_free(cep[c]);
        dat_ep_free(sep[c]);
    }
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* Posting works whatever the SRQ's EPs do: with none, with a connected one, after that
 * one is disconnected and freed. (SHUTDOWN and ERROR cannot be reached through the API.) */
static void valid_in_every_state(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    DAT_SRQ_PARAM prm;
    REQUIRE_OK(dat_srq_query(srq, DAT_SRQ_FIELD_SRQ_STATE, &prm), "dat_srq_query");
    EXPECT(prm.srq_state == DAT_SRQ_STATE_OPERATIONAL, "fresh SRQ in state %d", prm.srq_state);
    EXPECT(h_srq_post(srq, &rm, 0, 64, 1) == DAT_SUCCESS, "post with no EP");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    EXPECT(h_srq_post(srq, &rm, 64, 64, 2) == DAT_SUCCESS, "post with a connected EP");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    DAT_EVENT ev;
    REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
    EXPECT(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
    REQUIRE_OK(h_disconnect(p, cep, &p->cli, sep, &p->srv), "disconnect");
    EXPECT(h_srq_post(srq, &rm, 128, 64, 3) == DAT_SUCCESS, "post with a disconnected EP");
    dat_ep_free(sep);
    dat_ep_free(cep);
    EXPECT(h_srq_post(srq, &rm, 192, 64, 4) == DAT_SUCCESS, "post after the EP is freed");
    REQUIRE_OK(dat_srq_query(srq, DAT_SRQ_FIELD_SRQ_STATE, &prm), "dat_srq_query");
    EXPECT(prm.srq_state == DAT_SRQ_STATE_OPERATIONAL, "SRQ in state %d", prm.srq_state);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* The synchronous errors of dat_srq_post_recv. */
static void segment_outside_lmr_invalid_parameter(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    struct h_mem rm;
    REQUIRE_OK(h_srq(&p->srv, 16, 2, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr");
    EXPECT_TYPE(h_srq_post(srq, &rm, 4000, 200, 1), DAT_INVALID_PARAMETER,
                "segment past the LMR's end");
    DAT_LMR_TRIPLET iov[2] = {h_iov(&rm, 0, 64), h_iov(&rm, 0, 64)};
    iov[1].virtual_address -= 4096; /* before the LMR's start */
    DAT_DTO_COOKIE ck = {.as_64 = 2};
    EXPECT_TYPE(dat_srq_post_recv(srq, 2, iov, ck), DAT_INVALID_PARAMETER,
                "second segment before the LMR");
    DAT_COUNT avail = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 0, "%d buffers on the SRQ after refused posts", avail);
    dat_srq_free(srq);
    h_mem_free(&rm);
}

static void lmr_of_other_pz_protection_violation(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_PZ_HANDLE pz2;
    struct h_mem rm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(dat_pz_create(p->srv.ia, &pz2), "dat_pz_create");
    REQUIRE_OK(h_mem(&p->srv, pz2, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr in another PZ");
    EXPECT_TYPE(h_srq_post(srq, &rm, 0, 64, 1), DAT_PROTECTION_VIOLATION, "LMR of another PZ");
    dat_srq_free(srq);
    h_mem_free(&rm);
    dat_pz_free(pz2);
}

static void lmr_without_local_write_privileges_violation(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    struct h_mem rm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096,
                     DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG, &rm),
               "read-only lmr");
    EXPECT_TYPE(h_srq_post(srq, &rm, 0, 64, 1), DAT_PRIVILEGES_VIOLATION,
                "LMR without local write");
    dat_srq_free(srq);
    h_mem_free(&rm);
}

static void bad_handle_invalid_handle(struct h_pair* p) {
    struct h_mem rm;
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr");
    DAT_LMR_TRIPLET iov = h_iov(&rm, 0, 64);
    DAT_DTO_COOKIE ck = {.as_64 = 1};
    EXPECT_TYPE(dat_srq_post_recv(DAT_HANDLE_NULL, 1, &iov, ck), DAT_INVALID_HANDLE,
                "DAT_HANDLE_NULL");
    /* A live handle of another type (a PZ), passed where an SRQ is due. */
    EXPECT_TYPE(dat_srq_post_recv((DAT_SRQ_HANDLE)p->srv.pz, 1, &iov, ck), DAT_INVALID_HANDLE,
                "a PZ handle");
    h_mem_free(&rm);
}

/* An EP created on the SRQ but not connected takes no buffer from it. */
static void only_connected_eps_dequeue(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE ep;
    struct h_mem rm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr");
    for (int i = 0; i < 4; ++i) REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, i), "post");
    DAT_EP_ATTR a = h_ep_attr(4, 4, 1, 1, 1);
    REQUIRE_OK(dat_ep_create_with_srq(p->srv.ia, p->srv.pz, p->srv.rcv_evd, p->srv.req_evd,
                                      p->srv.conn_evd, srq, &a, &ep),
               "dat_ep_create_with_srq");
    DAT_COUNT avail = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 4, "%d buffers on the SRQ with an unconnected EP, want 4", avail);
    DAT_COUNT n = -1, span = -1;
    DAT_RETURN ret = dat_ep_recv_query(ep, &n, &span);
    if (ret == DAT_SUCCESS)
        EXPECT(n == 0 && span == 0, "unconnected EP holds %d buffers (span %d)", n, span);
    EXPECT(h_empty(p->srv.rcv_evd), "a completion for an unconnected EP");
    dat_ep_free(ep);
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 4, "%d buffers on the SRQ after the EP is freed, want 4", avail);
    dat_srq_free(srq);
    h_mem_free(&rm);
}

/* Two messages complete, the connection is closed before they are reaped: they stay on the
 * EP's recv_evd, successful; the two buffers no message took stay on the SRQ (no flush
 * completion for them). */
static void disconnect_completed_to_recv_evd_rest_stay(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int i = 0; i < 4; ++i)
        REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, 100 + i), "post");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 16), "send 1");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 16), "send 2");
    /* Both messages placed before the server disconnects: a send's completion says so over
     * RoCE (the peer's acknowledgement), not over iWARP (TCP took it), where the server's
     * disconnect could otherwise come before its QP read them. */
    REQUIRE_OK(h_srq_wait_available(srq, 2, NULL, NULL), "both messages placed");
    REQUIRE_OK(h_disconnect(p, sep, &p->srv, cep, &p->cli), "disconnect");
    for (int i = 0; i < 2; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "completion after the disconnect");
        EXPECT(dto_ok(&ev), "completed buffer %d reported with status %d", i,
               ev.event_data.dto_completion_event_data.status);
        EXPECT(ev.event_data.dto_completion_event_data.ep_handle == sep,
               "completion of another EP");
        EXPECT(ev.event_data.dto_completion_event_data.transfered_length == 16, "length %u",
               (unsigned)ev.event_data.dto_completion_event_data.transfered_length);
    }
    EXPECT(h_empty(p->srv.rcv_evd), "a completion for a buffer no message took");
    DAT_COUNT avail = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 2, "%d buffers left on the SRQ, want 2", avail);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* An lmr_context that names no LMR (a freed LMR's, or one never made): the page's
 * DAT_PRIVILEGES_VIOLATION ("One of the LMRs used in local_iov was either invalid or did not
 * have the local write privileges"), and nothing is posted. */
static void invalid_lmr_privileges_violation(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    struct h_mem rm, gone;
    REQUIRE_OK(h_srq(&p->srv, 16, 2, 0, &srq), "dat_srq_create (2 segments)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &gone), "lmr (freed)");
    DAT_LMR_TRIPLET freed = h_iov(&gone, 0, 64);
    REQUIRE_OK(dat_lmr_free(gone.lmr), "dat_lmr_free");
    DAT_DTO_COOKIE ck = {.as_64 = 1};
    EXPECT_TYPE(dat_srq_post_recv(srq, 1, &freed, ck), DAT_PRIVILEGES_VIOLATION,
                "the lmr_context of a freed LMR");
    DAT_LMR_TRIPLET never = h_iov(&rm, 0, 64);
    never.lmr_context = rm.lmr_ctx ^ 0x5a5a5a00u;
    EXPECT_TYPE(dat_srq_post_recv(srq, 1, &never, ck), DAT_PRIVILEGES_VIOLATION,
                "an lmr_context no LMR has");
    DAT_LMR_TRIPLET two[2] = {h_iov(&rm, 0, 64), freed};
    EXPECT_TYPE(dat_srq_post_recv(srq, 2, two, ck), DAT_PRIVILEGES_VIOLATION,
                "a valid segment, then a freed LMR's");
    DAT_COUNT avail = -1, outst = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, &outst), "dat_srq_query");
    EXPECT(avail == 0 && outst == 0, "after the refused posts: %d available, %d outstanding", avail,
           outst);
    REQUIRE_OK(h_srq_post(srq, &rm, 0, 64, 2), "a valid post after them");
    dat_srq_free(srq);
    h_mem_free(&rm);
    gone.lmr = DAT_HANDLE_NULL; /* freed above; the buffer still is to be */
    h_mem_free(&gone);
}

int main(int argc, char** argv) {
    struct h_pair p;
    h_init(argc, argv, &p);
    H_RULE("srq_post_recv_fills_segments_in_order", fills_segments_in_order, &p);
    H_RULE("srq_post_recv_zero_segments_and_null_iov", zero_segments_and_null_iov, &p);
    H_RULE("srq_post_recv_completes_in_send_order_per_connection",
           completes_in_send_order_per_connection, &p);
    H_RULE("srq_post_recv_valid_in_every_state", valid_in_every_state, &p);
    H_RULE("srq_post_recv_segment_outside_lmr_invalid_parameter",
           segment_outside_lmr_invalid_parameter, &p);
    H_RULE("srq_post_recv_lmr_of_other_pz_protection_violation",
           lmr_of_other_pz_protection_violation, &p);
    H_RULE("srq_post_recv_lmr_without_local_write_privileges_violation",
           lmr_without_local_write_privileges_violation, &p);
    H_RULE("srq_post_recv_bad_handle_invalid_handle", bad_handle_invalid_handle, &p);
    H_RULE("srq_post_recv_invalid_lmr_privileges_violation", invalid_lmr_privileges_violation, &p);
    H_RULE("srq_only_connected_eps_dequeue", only_connected_eps_dequeue, &p);
    H_RULE("srq_disconnect_completed_to_recv_evd_untaken_stay_on_srq",
           disconnect_completed_to_recv_evd_rest_stay, &p);
    return h_finish(&p);
}
