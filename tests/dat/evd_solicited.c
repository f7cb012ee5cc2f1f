/* The receive's DAT_COMPLETION_SOLICITED_WAIT_FLAG (DAT 1.2, dat_ep_post_recv and the EP's
 * recv_completion_flags): the successful completion of such a receive does not wake a
 * dat_evd_wait, nor fire the EVD's CNO, unless its message was sent with the solicited flag;
 * an unsuccessful one always does. The completions themselves are all delivered, in order.
 *
 * Each rule gives the receiving EP an EVD of its own (and a CNO, where the rule is about the
 * CNO), waits until an unsolicited message has arrived (the EP's count of completed receives,
 * through dat_ep_recv_query, or the SRQ's count), then waits on the EVD for longer than the
 * completion takes to be queued: the wait must expire. A solicited message then wakes it, and
 * the first event it hands out is the unsolicited one. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define QUIET_US (500 * 1000) /* a wait that must expire: longer than a completion takes */

enum mode {
    BY_EP_ATTR,  /* the EP's recv_completion_flags ask for it; receives posted with the default */
    BY_POST,     /* dat_ep_post_recv's flags ask for it; the EP's attributes do not */
    BY_SRQ_ATTR, /* an SRQ EP whose recv_completion_flags ask for it */
};

struct rig {
    DAT_EVD_HANDLE evd;
    DAT_CNO_HANDLE cno;
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    int disconnected; /* already: teardown would wait H_WAIT_US for an event that never comes */
};

static DAT_RETURN post_recv(struct rig* r, enum mode m, int i) {
    DAT_LMR_TRIPLET iov = h_iov(&r->rm, (DAT_VLEN)i * 64, 64);
    DAT_DTO_COOKIE ck = {.as_64 = (uint64_t)i};
    if (m == BY_SRQ_ATTR) return dat_srq_post_recv(r->srq, 1, &iov, ck);
    return dat_ep_post_recv(r->sep, 1, &iov, ck,
                            m == BY_POST ? DAT_COMPLETION_SOLICITED_WAIT_FLAG
                                         : DAT_COMPLETION_DEFAULT_FLAG);
}

static DAT_RETURN send_msg(struct h_pair* p, struct rig* r, int solicited) {
    DAT_LMR_TRIPLET iov = h_iov(&r->sm, 0, 16);
    DAT_DTO_COOKIE ck = {.as_64 = 0x5e7d};
    DAT_RETURN ret =
        dat_ep_post_send(r->cep, 1, &iov, ck,
                         solicited ? DAT_COMPLETION_SOLICITED_WAIT_FLAG : DAT_COMPLETION_DEFAULT_FLAG);
    return ret == DAT_SUCCESS ? h_reap_sends(&p->cli, 1) : ret;
}

/* Waits (bounded) until `n` of the receiving EP's receives have completed at snicd: the
 * EP's allocated count (`posted` - completed) or, for an SRQ EP, the SRQ's available count
 * and the EP holding none. */
static int wait_arrived(struct rig* r, enum mode m, int posted, int n) {
    const time_t give_up = time(NULL) + 30;
    while (time(NULL) < give_up) {
        DAT_COUNT held = -1;
        if (dat_ep_recv_query(r->sep, &held, NULL) != DAT_SUCCESS) return 0;
        if (m == BY_SRQ_ATTR) {
            DAT_COUNT avail = -1;
            if (h_srq_counts(r->srq, &avail, NULL) != DAT_SUCCESS) return 0;
            if (avail == posted - n && held == 0) return 1;
        } else if (held == posted - n) {
            return 1;
        }
    }
    return 0;
}

static void teardown(struct h_pair* p, struct rig* r) {
    if (!r->disconnected) h_disconnect(p, r->cep, &p->cli, r->sep, &p->srv);
    DAT_EVENT ev;
    while (dat_evd_dequeue(r->evd, &ev) == DAT_SUCCESS) {
    }
    dat_ep_free(r->cep);
    dat_ep_free(r->sep);
    if (r->srq != DAT_HANDLE_NULL) dat_srq_free(r->srq);
    dat_evd_free(r->evd);
    if (r->cno != DAT_HANDLE_NULL) dat_cno_free(r->cno);
    h_mem_free(&r->rm);
    h_mem_free(&r->sm);
}

static void check_dto(const DAT_EVENT* ev, uint64_t cookie, DAT_DTO_COMPLETION_STATUS status,
                      const char* what) {
    EXPECT(ev->event_number == DAT_DTO_COMPLETION_EVENT, "%s: event %s", what,
           h_event_str(ev->event_number));
    const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev->event_data.dto_completion_event_data;
    EXPECT(d->user_cookie.as_64 == cookie, "%s: cookie %llu, want %llu", what,
           (unsigned long long)d->user_cookie.as_64, (unsigned long long)cookie);
    EXPECT(d->status == status, "%s: status %d, want %d", what, d->status, status);
}

/* The rule for one way of asking; with_cno: the waiter is dat_cno_wait on the EVD's CNO. */
static void solicited_wait(struct h_pair* p, enum mode m, int with_cno) {
    struct rig r;
    memset(&r, 0, sizeof r);
    r.cno = DAT_HANDLE_NULL;
    r.srq = DAT_HANDLE_NULL;
    if (with_cno) {
        DAT_OS_WAIT_PROXY_AGENT agent = {NULL, NULL};
        REQUIRE_OK(dat_cno_create(p->srv.ia, agent, &r.cno), "dat_cno_create");
    }
    REQUIRE_OK(dat_evd_create(p->srv.ia, H_QLEN, r.cno, DAT_EVD_DTO_FLAG, &r.evd),
               "dat_evd_create");
    DAT_EP_ATTR a = h_ep_attr(16, 16, 1, 1, 1);
    if (m != BY_POST) a.recv_completion_flags = DAT_COMPLETION_SOLICITED_WAIT_FLAG;
    if (m == BY_SRQ_ATTR) {
        REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &r.srq), "dat_srq_create");
        REQUIRE_OK(dat_ep_create_with_srq(p->srv.ia, p->srv.pz, r.evd, p->srv.req_evd,
                                          p->srv.conn_evd, r.srq, &a, &r.sep),
                   "dat_ep_create_with_srq");
    } else {
        REQUIRE_OK(dat_ep_create(p->srv.ia, p->srv.pz, r.evd, p->srv.req_evd, p->srv.conn_evd, &a,
                                 &r.sep),
                   "dat_ep_create");
    }
    DAT_EP_ATTR ca = h_ep_attr(16, 16, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->cli, &ca, &r.cep), "dat_ep_create (client)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &r.rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &r.sm), "lmr (send)");
    for (int i = 0; i < 3; ++i) REQUIRE_OK(post_recv(&r, m, i), "post receive");
    REQUIRE_OK(h_connect(p, r.sep, r.cep), "connect");

    REQUIRE_OK(send_msg(p, &r, 0), "unsolicited send");
    REQUIRE(wait_arrived(&r, m, 3, 1), "the unsolicited message did not arrive within 30 s");
    DAT_EVENT ev;
    DAT_COUNT nmore = -1;
    DAT_EVD_HANDLE fired = DAT_HANDLE_NULL;
    if (with_cno) {
        EXPECT_TYPE(dat_cno_wait(r.cno, QUIET_US, &fired), DAT_TIMEOUT_EXPIRED,
                    "dat_cno_wait with only an unsolicited completion");
    } else {
        EXPECT_TYPE(dat_evd_wait(r.evd, QUIET_US, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED,
                    "dat_evd_wait with only an unsolicited completion");
    }

    REQUIRE_OK(send_msg(p, &r, 1), "solicited send");
    if (with_cno) {
        REQUIRE_OK(dat_cno_wait(r.cno, H_WAIT_US, &fired), "dat_cno_wait for the solicited one");
        EXPECT(fired == r.evd, "dat_cno_wait named another EVD");
        REQUIRE_OK(h_wait(r.evd, &ev), "the first completion");
    } else {
        REQUIRE_OK(dat_evd_wait(r.evd, H_WAIT_US, 1, &ev, &nmore),
                   "dat_evd_wait for the solicited one");
    }
    check_dto(&ev, 0, DAT_DTO_SUCCESS, "first event (the unsolicited message)");
    REQUIRE_OK(dat_evd_dequeue(r.evd, &ev), "second completion");
    check_dto(&ev, 1, DAT_DTO_SUCCESS, "second event (the solicited message)");

    if (m != BY_SRQ_ATTR) {
        /* An error wakes whatever was asked: the third receive is flushed by a disconnect. */
        REQUIRE_OK(h_disconnect(p, r.cep, &p->cli, r.sep, &p->srv), "disconnect");
        r.disconnected = 1;
        REQUIRE_OK(dat_evd_wait(r.evd, H_WAIT_US, 1, &ev, &nmore), "dat_evd_wait for the flush");
        check_dto(&ev, 2, DAT_DTO_ERR_FLUSHED, "third event (flushed)");
    }
    teardown(p, &r);
}

static void by_ep_attr(struct h_pair* p) {
    solicited_wait(p, BY_EP_ATTR, 0);
}
static void by_post(struct h_pair* p) {
    solicited_wait(p, BY_POST, 0);
}
static void by_srq_ep_attr(struct h_pair* p) {
    solicited_wait(p, BY_SRQ_ATTR, 0);
}
static void by_ep_attr_cno(struct h_pair* p) {
    solicited_wait(p, BY_EP_ATTR, 1);
}

int main(int argc, char** argv) {
    struct h_pair p;
    h_init(argc, argv, &p);
    H_RULE("evd_wait_solicited_wait_ep_attr_wakes_only_for_solicited_or_error", by_ep_attr, &p);
    H_RULE("evd_wait_solicited_wait_post_flag_wakes_only_for_solicited_or_error", by_post, &p);
    H_RULE("evd_wait_solicited_wait_srq_ep_wakes_only_for_solicited", by_srq_ep_attr, &p);
    H_RULE("cno_wait_solicited_wait_fires_only_for_solicited_or_error", by_ep_attr_cno, &p);
    return h_finish(&p);
}
