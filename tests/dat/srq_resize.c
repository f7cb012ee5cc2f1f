/* dat_srq_resize and dat_srq_set_lw (DAT 1.2 pages): a resize never loses a posted buffer,
 * also under traffic; DAT_INVALID_STATE when the outstanding buffers (on the SRQ, held by
 * EPs, completed but not reaped) exceed the new size or the new size is under the low
 * watermark; the low-watermark asynchronous event once per arming. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

static int dto_ok(const DAT_EVENT* ev) {
    return ev->event_number == DAT_DTO_COMPLETION_EVENT &&
           ev->event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS;
}

/* One thread drives both ends: the client sends only into buffers known to be posted (no
 * receiver-not-ready retries), the server reaps, reposts and resizes the SRQ up and down
 * between 8 and 64 as it goes (never below what is outstanding). Every message arrives once
 * and in order, every buffer completes exactly once. */
#define TRAFFIC_MSGS 2000
#define SLOTS 64
static void resize_under_traffic_loses_no_buffer(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, SLOTS * 64, DAT_MEM_PRIV_ALL_FLAG, &rm),
               "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, SLOTS * 64, DAT_MEM_PRIV_ALL_FLAG, &sm),
               "lmr (send)");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    static int posted_gen[SLOTS]; /* per slot: 0 free, else generation + 1 of its buffer */
    memset(posted_gen, 0, sizeof posted_gen);
    int size = 16, outstanding = 0, sent = 0, received = 0, resizes = 0;
    uint64_t gen = 0;
    int sends_unreaped = 0;
    while (received < TRAFFIC_MSGS) {
        /* Post into free slots up to the SRQ's current size. */
        for (int s = 0; s < SLOTS && outstanding < size; ++s) {
            if (posted_gen[s]) continue;
            ++gen;
            REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)s * 64, 64, (gen << 8) | (uint64_t)s),
                       "post");
            posted_gen[s] = (int)gen;
            ++outstanding;
        }
        /* Send as many messages as there are buffers not yet claimed by a message. */
        int credit = outstanding - (sent - received);
        for (; credit > 0 && sent < TRAFFIC_MSGS && sends_unreaped < 32; --credit) {
            unsigned char* m = sm.buf + (sent % SLOTS) * 64;
            memcpy(m, &sent, sizeof sent);
            REQUIRE_OK(h_post_send(cep, &sm, (DAT_VLEN)(sent % SLOTS) * 64, sizeof sent, 0),
                       "send");
            ++sent;
            ++sends_unreaped;
        }
        /* Resize: down to exactly what is outstanding (posted, not yet reaped: on the SRQ,
         * held by the EP, or completed on the EVD), at least 8, or up to 64, alternately.
         * The new size never is under the outstanding count, so it must be accepted. */
        const int target = (resizes % 2 == 0) ? (outstanding > 8 ? outstanding : 8) : SLOTS;
        DAT_RETURN ret = dat_srq_resize(srq, target);
        REQUIRE(ret == DAT_SUCCESS, "resize to %d with %d outstanding: %s", target, outstanding,
                h_str(ret));
        size = target;
        ++resizes;
        if (sent == received) { /* nothing in flight: the sends' completions are due */
            REQUIRE_OK(h_reap_sends(&p->cli, sends_unreaped), "send completions");
            sends_unreaped = 0;
            continue;
        }
        /* Reap one receive (and the sends that completed meanwhile). */
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "message %d: %s status %d", received, h_event_str(ev.event_number),
                ev.event_data.dto_completion_event_data.status);
        const uint64_t ck = ev.event_data.dto_completion_event_data.user_cookie.as_64;
        const int slot = (int)(ck & 0xff);
        REQUIRE(slot < SLOTS && posted_gen[slot] == (int)(ck >> 8),
                "cookie 0x%llx: no such buffer outstanding (completed twice?)",
                (unsigned long long)ck);
        int seq;
        memcpy(&seq, rm.buf + slot * 64, sizeof seq);
        REQUIRE(seq == received, "message %d arrived where %d was due", seq, received);
        posted_gen[slot] = 0;
        --outstanding;
        ++received;
        DAT_EVENT sev;
        while (sends_unreaped > 0 && dat_evd_dequeue(p->cli.req_evd, &sev) == DAT_SUCCESS) {
            REQUIRE(dto_ok(&sev), "send completion: status %d",
                    sev.event_data.dto_completion_event_data.status);
            --sends_unreaped;
        }
        if (sends_unreaped >= 32) {
            REQUIRE_OK(h_reap_sends(&p->cli, 1), "send completion");
            --sends_unreaped;
        }
    }
    REQUIRE_OK(h_reap_sends(&p->cli, sends_unreaped), "last send completions");
    DAT_COUNT avail = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == outstanding, "%d buffers on the SRQ, the test posted %d not yet completed",
           avail, outstanding);
    EXPECT(h_empty(p->srv.rcv_evd), "a receive completion more than messages sent");
    printf("note: %d messages, %d resizes\n", received, resizes);
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* 10 buffers posted on an SRQ of 16: resize(9) is refused, resize(10) accepted. Then four
 * complete and stay unreaped (still outstanding): resize(9) is refused, resize(10) accepted;
 * once they are reaped, resize(6) is accepted and every buffer is still there. */
static void resize_invalid_state_when_outstanding_exceed(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int i = 0; i < 10; ++i) REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, i), "post");
    EXPECT_TYPE(dat_srq_resize(srq, 9), DAT_INVALID_STATE, "resize(9) with 10 on the SRQ");
    EXPECT(dat_srq_resize(srq, 10) == DAT_SUCCESS, "resize(10) with 10 on the SRQ refused");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    for (int i = 0; i < 4; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    /* The four messages arrived (a send completes before that on iWARP): their buffers are
     * completed, not reaped. */
    REQUIRE_OK(h_srq_wait_available(srq, 6, NULL, NULL), "dat_srq_query");
    EXPECT_TYPE(dat_srq_resize(srq, 9), DAT_INVALID_STATE,
                "resize(9) with 6 on the SRQ + 4 unreaped");
    EXPECT(dat_srq_resize(srq, 10) == DAT_SUCCESS,
           "resize(10) with 6 on the SRQ + 4 unreaped refused");
    DAT_COUNT avail = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 6, "%d on the SRQ, want 6", avail);
    int seen[10] = {0};
    for (int i = 0; i < 4; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
        const uint64_t k = ev.event_data.dto_completion_event_data.user_cookie.as_64;
        REQUIRE(k < 10 && !seen[k], "cookie %llu unknown or twice", (unsigned long long)k);
        seen[k] = 1;
    }
    EXPECT(dat_srq_resize(srq, 6) == DAT_SUCCESS, "resize(6) with 6 outstanding refused");
    REQUIRE_OK(h_srq_counts(srq, &avail, NULL), "dat_srq_query");
    EXPECT(avail == 6, "after resize(6): %d available, want 6", avail);
    for (int i = 0; i < 6; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    for (int i = 0; i < 6; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion after the resize");
        REQUIRE(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
        const uint64_t k = ev.event_data.dto_completion_event_data.user_cookie.as_64;
        EXPECT(k < 10 && !seen[k], "cookie %llu unknown or twice", (unsigned long long)k);
        if (k < 10) seen[k] = 1;
    }
    for (int i = 0; i < 10; ++i) EXPECT(seen[i], "buffer %d lost", i);
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

static void resize_invalid_state_below_low_watermark(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(dat_srq_set_lw(srq, 8), "dat_srq_set_lw(8)");
    EXPECT_TYPE(dat_srq_resize(srq, 7), DAT_INVALID_STATE, "resize(7) under low watermark 8");
    EXPECT(dat_srq_resize(srq, 8) == DAT_SUCCESS, "resize(8) at low watermark 8 refused");
    EXPECT(dat_srq_resize(srq, 32) == DAT_SUCCESS, "resize(32) refused");
    DAT_SRQ_PARAM prm;
    REQUIRE_OK(dat_srq_query(srq, DAT_SRQ_FIELD_MAX_RECV_DTO | DAT_SRQ_FIELD_LOW_WATERMARK, &prm),
               "dat_srq_query");
    EXPECT(prm.max_recv_dtos >= 32, "max_recv_dtos %d after resize(32)", prm.max_recv_dtos);
    EXPECT(prm.low_watermark == 8, "low_watermark %d, want 8", prm.low_watermark);
    dat_srq_free(srq);
}

/* Counts the SRQ low-watermark events on the async EVD now (non-blocking). */
static int lw_events(struct h_side* s, DAT_SRQ_HANDLE srq, int* others) {
    int n = 0;
    DAT_EVENT ev;
    while (dat_evd_dequeue(s->async_evd, &ev) == DAT_SUCCESS) {
        const DAT_ASYNCH_ERROR_EVENT_DATA* a = &ev.event_data.asynch_error_event_data;
        if (a->dat_handle == (DAT_HANDLE)srq && a->reason == DAT_SRQ_LOW_WATERMARK_EVENT)
            ++n;
        else
            ++*others;
    }
    return n;
}

/* Waits (bounded) for one async event and says whether it is srq's low watermark. */
static int wait_lw_event(struct h_side* s, DAT_SRQ_HANDLE srq, DAT_EVENT_NUMBER* num) {
    DAT_EVENT ev;
    if (h_wait(s->async_evd, &ev) != DAT_SUCCESS) return 0;
    *num = ev.event_number;
    const DAT_ASYNCH_ERROR_EVENT_DATA* a = &ev.event_data.asynch_error_event_data;
    return a->dat_handle == (DAT_HANDLE)srq && a->reason == DAT_SRQ_LOW_WATERMARK_EVENT;
}

/* 8 buffers, low watermark 4: the 5th message takes the count below 4 and raises the event
 * once; the 6th to 8th raise none. Re-armed at 6 with 4 fresh buffers (4 on the SRQ): the
 * event comes in the call itself; re-armed at 2 later: once more. */
static void set_lw_event_once_per_arming(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    int others = 0;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int i = 0; i < 8; ++i) REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, i), "post");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    REQUIRE_OK(dat_srq_set_lw(srq, 4), "dat_srq_set_lw(4)");
    EXPECT(lw_events(&p->srv, srq, &others) == 0, "an event with 8 buffers over watermark 4");
    for (int i = 0; i < 4; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    /* 4 left on the SRQ: not below 4 yet. */
    EXPECT(lw_events(&p->srv, srq, &others) == 0, "an event with 4 buffers at watermark 4");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send 5");
    DAT_EVENT_NUMBER num = 0;
    EXPECT(wait_lw_event(&p->srv, srq, &num), "no low-watermark event when the SRQ fell to 3");
    printf("note: the SRQ low-watermark event is %s\n", h_event_str(num));
    for (int i = 0; i < 3; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send 6-8");
    for (int i = 0; i < 8; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
    }
    /* Every receive is reaped; the EP took its buffers before those completions. */
    EXPECT(lw_events(&p->srv, srq, &others) == 0, "a second event without re-arming");
    for (int i = 0; i < 4; ++i)
        REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, 10 + i), "repost");
    REQUIRE_OK(dat_srq_set_lw(srq, 6), "dat_srq_set_lw(6) with 4 on the SRQ");
    EXPECT(wait_lw_event(&p->srv, srq, &num), "no event from arming at 6 with 4 on the SRQ");
    REQUIRE_OK(dat_srq_set_lw(srq, 2), "dat_srq_set_lw(2)");
    for (int i = 0; i < 2; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    EXPECT(lw_events(&p->srv, srq, &others) == 0, "an event with 2 at watermark 2");
    REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    EXPECT(wait_lw_event(&p->srv, srq, &num), "no event when the SRQ fell to 1 under watermark 2");
    for (int i = 0; i < 3; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
    }
    EXPECT(lw_events(&p->srv, srq, &others) == 0, "more events than armings");
    EXPECT(others == 0, "%d other asynchronous events", others);
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* dat_srq_query's outstanding_dto_count, "the number of occupied SRQ entries not available
 * for new Recv buffer postings", counts what dat_srq_resize counts: every buffer posted and
 * not yet reaped, on the SRQ, held by an EP or completed on an EVD. 10 posted: 10; 4 of them
 * completed, unreaped: still 10 (6 available); reaped: 6. */
static void srq_query_outstanding_counts_unreaped(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int i = 0; i < 10; ++i) REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, i), "post");
    DAT_COUNT avail = -1, outst = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, &outst), "dat_srq_query");
    EXPECT(avail == 10 && outst == 10, "10 posted: %d available, %d outstanding", avail, outst);
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    for (int i = 0; i < 4; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    REQUIRE_OK(h_srq_wait_available(srq, 6, &avail, &outst), "dat_srq_query");
    EXPECT(avail == 6 && outst == 10, "4 completed unreaped: %d available, %d outstanding", avail,
           outst);
    for (int i = 0; i < 4; ++i) {
        DAT_EVENT ev;
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
    }
    REQUIRE_OK(h_srq_counts(srq, &avail, &outst), "dat_srq_query");
    EXPECT(avail == 6 && outst == 6, "4 reaped: %d available, %d outstanding", avail, outst);
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* The page counts as outstanding the buffers "for which completions have been generated but
 * not yet reaped by Consumer": a buffer is reaped when the consumer receives its event, not
 * when the provider moves completions between queues of its own. 10 posted, 4 arrived; one
 * event received, through a dat_evd_wait for 4 (so the provider holds the other three when
 * it hands out the first): 9 outstanding, resize(8) and resize(6) refused and the SRQ
 * unchanged, resize(9) accepted; the other three received: 6, and resize(6) accepted. */
static void resize_counts_completions_not_yet_received(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep, cep;
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, 16, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &rm), "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int i = 0; i < 10; ++i) REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)i * 64, 64, i), "post");
    REQUIRE_OK(h_srq_connect(p, srq, 4, &sep, &cep), "connect");
    for (int i = 0; i < 4; ++i) REQUIRE_OK(h_send(&p->cli, cep, &sm, 0, 8), "send");
    REQUIRE_OK(h_srq_wait_available(srq, 6, NULL, NULL), "dat_srq_query");
    DAT_EVENT ev;
    DAT_COUNT nmore = -1;
    REQUIRE_OK(dat_evd_wait(p->srv.rcv_evd, H_WAIT_US, 4, &ev, &nmore), "dat_evd_wait for 4");
    REQUIRE(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
    EXPECT(nmore == 3, "dat_evd_wait for 4: %d more, want 3", nmore);
    DAT_COUNT avail = -1, outst = -1;
    REQUIRE_OK(h_srq_counts(srq, &avail, &outst), "dat_srq_query");
    EXPECT(avail == 6 && outst == 9, "one of 4 received: %d available, %d outstanding (want 6, 9)",
           avail, outst);
    EXPECT_TYPE(dat_srq_resize(srq, 8), DAT_INVALID_STATE, "resize(8) with 9 outstanding");
    EXPECT_TYPE(dat_srq_resize(srq, 6), DAT_INVALID_STATE, "resize(6) with 9 outstanding");
    DAT_SRQ_PARAM prm;
    REQUIRE_OK(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &prm), "dat_srq_query");
    EXPECT(prm.max_recv_dtos == 16, "the refused resizes changed the SRQ's size to %d",
           prm.max_recv_dtos);
    EXPECT(dat_srq_resize(srq, 9) == DAT_SUCCESS, "resize(9) with 9 outstanding refused");
    for (int i = 0; i < 3; ++i) {
        REQUIRE_OK(h_wait(p->srv.rcv_evd, &ev), "receive completion");
        REQUIRE(dto_ok(&ev), "receive: status %d", ev.event_data.dto_completion_event_data.status);
    }
    REQUIRE_OK(h_srq_counts(srq, &avail, &outst), "dat_srq_query");
    EXPECT(avail == 6 && outst == 6, "all 4 received: %d available, %d outstanding (want 6, 6)",
           avail, outst);
    EXPECT(dat_srq_resize(srq, 6) == DAT_SUCCESS, "resize(6) with 6 outstanding refused");
    h_disconnect(p, cep, &p->cli, sep, &p->srv);
    dat_ep_free(cep);
    dat_ep_free(sep);
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

/* Under traffic on two connections sharing the SRQ: after every event the consumer
 * receives, dat_srq_query's outstanding count is exactly what the consumer posted and has not
 * received, and a resize to one less is refused. The consumer waits for two events at a time
 * where two are due, so that the provider holds completions the consumer has not received.
 * The clients send only into buffers known to be posted. */
#define PROBE_MSGS 600
#define PROBE_SRQ 32
static void resize_below_outstanding_refused_under_traffic(struct h_pair* p) {
    DAT_SRQ_HANDLE srq;
    DAT_EP_HANDLE sep[2], cep[2];
    struct h_mem rm, sm;
    REQUIRE_OK(h_srq(&p->srv, PROBE_SRQ, 1, 0, &srq), "dat_srq_create");
    REQUIRE_OK(h_mem(&p->srv, DAT_HANDLE_NULL, PROBE_SRQ * 64, DAT_MEM_PRIV_ALL_FLAG, &rm),
               "lmr (recv)");
    REQUIRE_OK(h_mem(&p->cli, DAT_HANDLE_NULL, 64, DAT_MEM_PRIV_ALL_FLAG, &sm), "lmr (send)");
    for (int c = 0; c < 2; ++c) REQUIRE_OK(h_srq_connect(p, srq, 4, &sep[c], &cep[c]), "connect");
    int posted = 0, sent = 0, received = 0, sends_done = 0, probes = 0;
    for (; posted < PROBE_SRQ; ++posted)
        REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)posted * 64, 64, (uint64_t)posted), "post");
    while (received < PROBE_MSGS) {
        for (; sent < posted && sent < PROBE_MSGS && sent - sends_done < 48; ++sent)
            REQUIRE_OK(h_post_send(cep[sent % 2], &sm, 0, 8, (uint64_t)sent), "send");
        DAT_EVENT ev;
        while (dat_evd_dequeue(p->cli.req_evd, &ev) == DAT_SUCCESS) {
            REQUIRE(dto_ok(&ev), "send completion: status %d",
                    ev.event_data.dto_completion_event_data.status);
            ++sends_done;
        }
        if (sent == received) { /* nothing in flight: the window waits for a send completion */
            REQUIRE_OK(h_reap_sends(&p->cli, 1), "send completion");
            ++sends_done;
            continue;
        }
        DAT_COUNT nmore = 0;
        const DAT_COUNT want = sent - received >= 2 ? 2 : 1;
        REQUIRE_OK(dat_evd_wait(p->srv.rcv_evd, H_WAIT_US, want, &ev, &nmore), "dat_evd_wait");
        REQUIRE(dto_ok(&ev), "receive %d: status %d", received,
                ev.event_data.dto_completion_event_data.status);
        ++received;
        const DAT_COUNT expect = posted - received;
        DAT_COUNT outst = -1;
        REQUIRE_OK(h_srq_counts(srq, NULL, &outst), "dat_srq_query");
        REQUIRE(outst == expect, "after %d received (%d more waiting): %d outstanding, want %d",
                received, nmore, outst, expect);
        if (expect > 1) {
            const DAT_RETURN ret = dat_srq_resize(srq, expect - 1);
            REQUIRE(DAT_GET_TYPE(ret) == DAT_INVALID_STATE,
                    "after %d received (%d more waiting): resize(%d) with %d outstanding "
                    "returned %s",
                    received, nmore, expect - 1, expect, h_str(ret));
            ++probes;
        }
        if (posted < PROBE_MSGS) {
            REQUIRE_OK(h_srq_post(srq, &rm, (DAT_VLEN)(posted % PROBE_SRQ) * 64, 64,
                                  (uint64_t)posted),
                       "repost");
            ++posted;
        }
    }
    REQUIRE_OK(h_reap_sends(&p->cli, sent - sends_done), "last send completions");
    printf("note: %d messages on 2 connections, %d resizes below the outstanding count probed\n",
           received, probes);
    for (int c = 0; c < 2; ++c) {
        h_disconnect(p, cep[c], &p->cli, sep[c], &p->srv);
        dat_ep_free(cep[c]);
        dat_ep_free(sep[c]);
    }
    dat_srq_free(srq);
    h_mem_free(&rm);
    h_mem_free(&sm);
}

int main(int argc, char** argv) {
    struct h_pair p;
    h_init(argc, argv, &p);
    H_RULE("srq_resize_under_traffic_loses_no_buffer", resize_under_traffic_loses_no_buffer, &p);
    H_RULE("srq_resize_invalid_state_when_outstanding_exceed_new_size",
           resize_invalid_state_when_outstanding_exceed, &p);
    H_RULE("srq_resize_invalid_state_below_low_watermark", resize_invalid_state_below_low_watermark,
           &p);
    H_RULE("srq_set_lw_event_once_per_arming", set_lw_event_once_per_arming, &p);
    H_RULE("srq_query_outstanding_counts_unreaped_buffers", srq_query_outstanding_counts_unreaped,
           &p);
    H_RULE("srq_resize_counts_completions_not_yet_received",
           resize_counts_completions_not_yet_received, &p);
    H_RULE("srq_resize_below_outstanding_refused_under_traffic",
           resize_below_outstanding_refused_under_traffic, &p);
    return h_finish(&p);
}
