/* dat_ep_recv_query (DAT 1.2 page): nbufs_allocated is the number of buffers allocated to
 * the EP and not yet completed (an EP without SRQ: allocated when posted; an SRQ EP: when it
 * takes one from the SRQ for an arriving message); bufs_alloc_span is the latest MSN of an
 * allocated buffer minus the latest MSN completed. Both from one snapshot: span >= count,
 * always, and never DAT_VALUE_UNKNOWN. The provider attributes announce the support. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static int dto_ok(const DAT_EVENT* ev) {
    return ev->event_number == DAT_DTO_COMPLETION_EVENT &&
           ev->event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS;
}

static void provider_attr_announces_support(struct h_pair* p) {
    EXPECT(p->srv.prov_attr.ep_recv_info_supported != 0,
           "provider attribute ep_recv_info_supported is %d",
           p->srv.prov_attr.ep_recv_info_supported);
    EXPECT(p->srv.prov_attr.srq_supported != 0, "provider attribute srq_supported is false");
}

/* Checks one sample against the bounds the test knows: lo <= n <= hi, span in [n, span_hi]
 * (exactly n for an EP without SRQ, whose buffers complete in posting order). */
#define SAMPLE(ep, lo, hi, span_hi, srq_ep, when)                                          \
    do {                                                                                   \
        DAT_COUNT n_ = -7, s_ = -7;                                                        \
        DAT_RETURN r_ = dat_ep_recv_query((ep), &n_, &s_);                                 \
        REQUIRE_OK(r_, "dat_ep_recv_query " when);                                         \
        REQUIRE(n_ != DAT_VALUE_UNKNOWN && s_ != DAT_VALUE_UNKNOWN,                        \
                "DAT_VALUE_UNKNOWN " when " (nbufs %d, span %d)", n_, s_);                 \
        REQUIRE(s_ >= n_, "span %d below count %d " when, s_, n_);                         \
        REQUIRE(n_ >= (lo) && n_ <= (hi), "nbufs_allocated %d outside [%d, %d] " when, n_, \
                (int)(lo), (int)(hi));                                                     \
        REQUIRE(s_ <= (span_hi), "bufs_alloc_span %d over %d " when, s_, (int)(span_hi));  \
        if (!(srq_ep))                                                                     \
            REQUIRE(s_ == n_, "span %d != count %d on an EP without SRQ " when, s_, n_);   \
        if (n_ > max_n) max_n = n_;                                                        \
        ++samples;                                                                         \
    } while (0)

/* EP without SRQ: 5 posted before the connection are allocated at once: (5, 5); two
 * messages complete: (3, 3); 2 more posted: (5, 5). */
static void non_srq_allocated_when_posted(struct h_pair* p) {
    int max_n = 0, samples = 0;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    DAT_EP_ATTR a = h_ep_attr(16, 16, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    SAMPLE(sep, 0, 0, 0, 0, "with nothing posted");
    for (int i = 0; i < 5; ++i) {
        DAT_LMR_TRIPLET iov = h_iov(&rm, (DAT_VLEN)i * 64, 64);
        DAT_DTO_COOKIE ck = {.as_64 = (uint64_t)i};
        REQUIRE_OK(dat_ep_post_recv(sep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG),
                   "dat_ep_post_recv");
    }
    SAMPLE(sep, 5, 5, 5, 0, "after 5 posts, unconnected");
    REQUIRE_OK(h_connect(p, sep, cep), "connect");
    SAMPLE(sep, 5, 5, 5, 0, "after 5 posts, connected");
    for (int i = 0; i < 2; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 16), "send");
    for (int i = 0; i < 2; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
    }
    SAMPLE(sep, 3, 3, 3, 0, "after 2 of 5 completed");
    for (int i = 5; i < 7; ++i) {
        DAT_LMR_TRIPLET iov = h_iov(&rm, (DAT_VLEN)i * 64, 64);
        DAT_DTO_COOKIE ck = {.as_64 = (uint64_t)i};
        REQUIRE_OK(dat_ep_post_recv(sep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG),
                   "dat_ep_post_recv");
    }
    SAMPLE(sep, 5, 5, 5, 0, "after 2 more posts");
    (void)max_n;
    REQUIRE_OK(h_disconnect(p, cep, &p->cli, sep, &p->srv), "disconnect");
    /* The 5 buffers still posted are flushed to the EP's recv_evd. */
    for (int i = 0; i < 5; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "flushed receive");
        EXPECT(ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED,
               "posted receive completed with status %d on disconnect, want DAT_DTO_ERR_FLUSHED",
               ev.event_data.dto_completion_event_data.status);
    }
    dat_ep_free(cep);
    dat_ep_free(sep);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* SRQ EP: buffers on the SRQ are not the EP's: (0, 0) before, and after messages that came
 * and completed. */
static void srq_allocated_when_taken(struct h_pair* p) {
    int max_n = 0, samples = 0;
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int i = 0; i < 5; ++i) REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, i), "post");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    SAMPLE(sep, 0, 0, 0, 1, "with 5 on the SRQ and no message");
    for (int i = 0; i < 2; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 16), "send");
    for (int i = 0; i < 2; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
    }
    SAMPLE(sep, 0, 0, 0, 1, "after 2 messages completed");
    DAT_COUNT avail = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 3, "%d left on the SRQ, want 3", avail);
    (void)max_n;
    (void)samples;
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* Messages of 64 KiB (many packets each) stream in while the receiver samples the counts in
 * a loop between completions. Bounds: with P buffers posted to the EP (or on the SRQ), S
 * messages sent and R completions reaped, an EP without SRQ holds between P-S and P-R
 * buffers; an SRQ EP between 0 and S-R, and its span is at most S-R. */
#define MSG (64 * 1024)
#define NMSG 300
#define NMSG_LIMIT 6000
#define WINDOW 16
static void sampled_while_messages_arrive(struct h_pair* p, int with_srq) {
    int max_n = 0, samples = 0;
    DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, WINDOW * MSG, DAT_MEM_PRIV_ALL_FLAG, &rm),
               "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, MSG, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    if (with_srq) {
        REQUIRE_OK(h_srq(&p->srv, WINDOW, 1, 0, &srq), "dat_srq_create");
        REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    } else {
        DAT_EP_ATTR a = h_ep_attr(WINDOW, WINDOW, 1, 1, 1);
        REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
        REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
        REQUIRE_OK(h_connect(p, sep, cep), "connect");
    }
    int posted = 0, sent = 0, reaped = 0, sends_done = 0, goal = NMSG;
    while (reaped < goal) {
        while (posted - reaped < WINDOW && posted < goal) {
            const DAT_VLEN off = (DAT_VLEN)(posted % WINDOW) * MSG;
            if (with_srq) {
                REQUIRE_OK(h_srq_post(srq, &rm, off, MSG, (uint64_t)posted), "dat_srq_post_recv");
            } else {
                DAT_LMR_TRIPLET iov = h_iov(&rm, off, MSG);
                DAT_DTO_COOKIE ck = {.as_64 = (uint64_t)posted};
                REQUIRE_OK(dat_ep_post_recv(sep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG),
                           "dat_ep_post_recv");
            }
            ++posted;
        }
        while (sent < posted && sent - sends_done < WINDOW) {
            REQUIRE_OK(h_post_send(cep, &sm, 0, MSG, (uint64_t)sent), "dat_ep_post_send");
            ++sent;
        }
        if (sent == reaped) { /* nothing in flight: the window waits for a send completion */
            REQUIRE_OK(h_reap_sends(&p->cli, 1), "send completion");
            ++sends_done;
            continue;
        }
        /* Sample until the next receive completes (bounded by the wall clock). */
        DAT_EVENT ev;
        const time_t give_up = time(NULL) + 30;
        for (;;) {
            if (with_srq)
                SAMPLE(sep, 0, sent - reaped, sent - reaped, 1, "while messages arrive (SRQ)");
            else
                SAMPLE(sep, posted - sent, posted - reaped, posted - reaped, 0,
                       "while messages arrive");
            if (dat_evd_dequeue(p->srv.rcv_evd, &ev) == DAT_SUCCESS) break;
            REQUIRE(time(NULL) < give_up, "receive %d did not complete within 30 s", reaped);
        }
        REQUIRE(dto_ok(&ev), "receive %d: status %d", reaped,
                ev.event_data.dto_completion_event_data.status);
        REQUIRE(ev.event_data.dto_completion_event_data.user_cookie.as_64 == (uint64_t)reaped ||
                    with_srq,
                "receive %d completed out of order", reaped);
        ++reaped;
        /* An SRQ EP holds a buffer only while its message arrives, and a sample catching
         * that is a race with the daemon (an iWARP port often places a whole message in one
         * turn): more messages until one does, within a bound. */
        if (with_srq && max_n == 0 && reaped == goal && goal < NMSG_LIMIT) goal += NMSG;
        while (dat_evd_dequeue(p->cli.req_evd, &ev) == DAT_SUCCESS) {
            REQUIRE(dto_ok(&ev), "send completion: status %d",
                    ev.event_data.dto_completion_event_data.status);
            ++sends_done;
        }
    }
    REQUIRE_OK(h_reap_sends(&p->cli, sent - sends_done), "last send completions");
    SAMPLE(sep, 0, 0, 0, with_srq, "when every message is reaped");
    printf("note: %s: %d messages, %d samples, at most %d buffers allocated at once\n",
           with_srq ? "SRQ EP" : "EP", reaped, samples, max_n);
    if (with_srq) EXPECT(max_n > 0, "no sample ever saw a buffer taken for an arriving message");
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    if (srq != DAT_HANDLE_NULL) dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

static void sampled_non_srq(struct h_pair* p) {
    sampled_while_messages_arrive(p, 0);
}
static void sampled_srq(struct h_pair* p) {
    sampled_while_messages_arrive(p, 1);
}

/* Posts `n` receives of 64 bytes on `ep`, cookies from `first`. */
static DAT_RETURN post_recvs(DAT_EP_HANDLE ep, const struct h_mem* m, int first, int n) {
    for (int i = first; i < first + n; ++i) {
        DAT_LMR_TRIPLET iov = h_iov(m, (DAT_VLEN)(i % 32) * 64, 64);
        DAT_DTO_COOKIE ck = {.as_64 = (uint64_t)i};
        const DAT_RETURN r = dat_ep_post_recv(ep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG);
        if (r != DAT_SUCCESS) return r;
    }
    return DAT_SUCCESS;
}

/* Waits for `n` events of `evd`, each a receive completion with status `status`. */
static DAT_RETURN expect_recvs(DAT_EVD_HANDLE evd, int n, DAT_DTO_COMPLETION_STATUS status) {
    for (int i = 0; i < n; ++i) {
        DAT_EVENT ev;
        const DAT_RETURN r = h_wait(evd, &ev);
        if (r != DAT_SUCCESS) return r;
        if (ev.event_number != DAT_DTO_COMPLETION_EVENT ||
            ev.event_data.dto_completion_event_data.status != status)
            return (DAT_RETURN)DAT_ABORT;
    }
    return DAT_SUCCESS;
}

/* The counts are the EP's since its QP was made or last reset, as the QP's own are. 3 posted,
 * connected, flushed by a disconnect: (0, 0); dat_ep_reset: (0, 0); 2 posted: (2, 2);
 * connected again (a new client) and one message received: (1, 1). Then the EP is freed and
 * another made on the same IA: (0, 0), and 1 posted: (1, 1). */
static void exact_after_reset_and_recreate(struct h_pair* p) {
    int max_n = 0, samples = 0;
    DAT_EP_HANDLE sep, cep, cep2;
    struct h_mem rm, sm;
    DAT_EP_ATTR a = h_ep_attr(16, 16, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep2), "dat_ep_create (second client)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    REQUIRE_OK(post_recvs(sep, &rm, 0, 3), "dat_ep_post_recv");
    REQUIRE_OK(h_connect(p, sep, cep), "connect");
    SAMPLE(sep, 3, 3, 3, 0, "with 3 posted, connected");
    REQUIRE_OK(h_disconnect(p, cep, &p->cli, sep, &p->srv), "disconnect");
    REQUIRE_OK(expect_recvs(p->srv.rcv_evd, 3, DAT_DTO_ERR_FLUSHED), "3 flushed receives");
    SAMPLE(sep, 0, 0, 0, 0, "after the 3 were flushed");
    REQUIRE_OK(dat_ep_reset(sep), "dat_ep_reset");
    SAMPLE(sep, 0, 0, 0, 0, "after dat_ep_reset");
    REQUIRE_OK(post_recvs(sep, &rm, 3, 2), "dat_ep_post_recv after the reset");
    SAMPLE(sep, 2, 2, 2, 0, "after 2 posts following the reset");
    REQUIRE_OK(h_connect(p, sep, cep2), "connect after the reset");
    REQUIRE_OK(h_send(&p->cli, cep2, &sm, 0, 16), "send");
    REQUIRE_OK(expect_recvs(p->srv.rcv_evd, 1, DAT_DTO_SUCCESS), "receive");
    SAMPLE(sep, 1, 1, 1, 0, "after 1 of 2 completed");
    REQUIRE_OK(h_disconnect(p, cep2, &p->cli, sep, &p->srv), "disconnect");
    REQUIRE_OK(expect_recvs(p->srv.rcv_evd, 1, DAT_DTO_ERR_FLUSHED), "flushed receive");
    REQUIRE_OK(dat_ep_free(sep), "dat_ep_free");
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create again");
    SAMPLE(sep, 0, 0, 0, 0, "on the EP made again");
    REQUIRE_OK(post_recvs(sep, &rm, 5, 1), "dat_ep_post_recv on the EP made again");
    SAMPLE(sep, 1, 1, 1, 0, "after 1 post on the EP made again");
    (void)max_n;
    dat_ep_free(sep);
    dat_ep_free(cep);
    dat_ep_free(cep2);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* A Disconnected EP connected again without dat_ep_reset (the provider resets its QP, as
 * the connection needs): its buffers were flushed, so (0, 0); 2 posted: (2, 2); one message:
 * (1, 1). The EP under test is the active side, which may connect again. */
static void exact_after_reconnect_without_reset(struct h_pair* p) {
    int max_n = 0, samples = 0;
    DAT_EP_HANDLE sep, sep2, cep;
    struct h_mem rm, sm;
    DAT_EP_ATTR a = h_ep_attr(16, 16, 1, 1, 1);
    REQUIRE_OK(h_ep(&p->srv, &a, &sep), "dat_ep_create (server)");
    REQUIRE_OK(h_ep(&p->srv, &a, &sep2), "dat_ep_create (second server)");
    REQUIRE_OK(h_ep(&p->cli, &a, &cep), "dat_ep_create (client)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    REQUIRE_OK(post_recvs(cep, &rm, 0, 2), "dat_ep_post_recv");
    REQUIRE_OK(h_connect(p, sep, cep), "connect");
    REQUIRE_OK(h_send(&p->srv, sep, &sm, 0, 16), "send");
    REQUIRE_OK(expect_recvs(p->cli.rcv_evd, 1, DAT_DTO_SUCCESS), "receive");
    SAMPLE(cep, 1, 1, 1, 0, "after 1 of 2 completed");
    REQUIRE_OK(h_disconnect(p, cep, &p->cli, sep, &p->srv), "disconnect");
    REQUIRE_OK(expect_recvs(p->cli.rcv_evd, 1, DAT_DTO_ERR_FLUSHED), "flushed receive");
    SAMPLE(cep, 0, 0, 0, 0, "Disconnected, its buffer flushed");
    REQUIRE_OK(h_connect(p, sep2, cep), "connect again without a reset");
    SAMPLE(cep, 0, 0, 0, 0, "connected again");
    REQUIRE_OK(post_recvs(cep, &rm, 2, 2), "dat_ep_post_recv after connecting again");
    SAMPLE(cep, 2, 2, 2, 0, "after 2 posts");
    REQUIRE_OK(h_send(&p->srv, sep2, &sm, 0, 16), "send");
    REQUIRE_OK(expect_recvs(p->cli.rcv_evd, 1, DAT_DTO_SUCCESS), "receive");
    SAMPLE(cep, 1, 1, 1, 0, "after 1 of 2 completed");
    (void)max_n;
    h_disconnect(p, cep, &p->cli, sep2, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_ep_free(sep2);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

int main(int argc, char** argv) {
    struct h_pair p;
    h_init(argc, argv, &p);
    H_RULE("ep_recv_query_provider_attr_announces_support", provider_attr_announces_support, &p);
    H_RULE("ep_recv_query_non_srq_allocated_when_posted", non_srq_allocated_when_posted, &p);
    H_RULE("ep_recv_query_srq_allocated_when_taken", srq_allocated_when_taken, &p);
    H_RULE("ep_recv_query_sampled_while_messages_arrive", sampled_non_srq, &p);
    H_RULE("ep_recv_query_srq_sampled_while_messages_arrive", sampled_srq, &p);
    H_RULE("ep_recv_query_exact_after_reset_and_recreate", exact_after_reset_and_recreate, &p);
    H_RULE("ep_recv_query_exact_after_reconnect_without_reset",
           exact_after_reconnect_without_reset, &p);
    return h_finish(&p);
}
