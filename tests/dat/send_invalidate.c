/* NetworkDirect SendAndInvalidate, through DAT's dat_ep_post_send_with_invalidate (DESIGN.md
 * "API semantics we must honour exactly"): a send that also invalidates a memory window of
 * the peer; the peer's receive reports the invalidated window (DAT_DTO_RECEIVE_WITH_INVALIDATE
 * and its RMR context) after the window is gone, and a later use of the window is a fatal
 * connection error that leaves the memory untouched. The flags: SILENT_SUCCESS (no
 * completion on success: DAT_COMPLETION_SUPPRESS_FLAG), READ_FENCE
 * (DAT_COMPLETION_BARRIER_FENCE_FLAG), SEND_AND_SOLICIT_EVENT
 * (DAT_COMPLETION_SOLICITED_WAIT_FLAG). The errors: not connected, too large, too many
 * outstanding, too many segments.
 *
 * Each rule connects a client EP to a server EP whose window (an RMR for the EP, bound to it)
 * covers the server's target buffer; the client invalidates that window. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

#include <dat2/udat_redirection.h>

/* libdat2 (dapl 2.1) declares dat_ep_post_send_with_invalidate and dat_rmr_create_for_ep but
 * exports neither: these call the provider's entry points through the macros of
 * <dat2/dat_redirection.h>, as libdat2's wrappers do for every call it exports. */
#define post_send_with_invalidate DAT_EP_POST_SEND_WITH_INVALIDATE
#define rmr_create_for_ep DAT_RMR_CREATE_FOR_EP

#define MSG 64        /* bytes of each message */
#define WINDOW 4096   /* the window over the server's target buffer */
#define MAX_MSG 8192  /* the EPs' max_message_size */
#define REQS 4        /* the EPs' max_request_dtos */
#define IOV 2         /* the EPs' max_request_iov */

struct link {
    DAT_EP_HANDLE sep, cep;
    struct h_mem target; /* server: what the window covers */
    struct h_mem rbuf;   /* server: receive buffers */
    struct h_mem src;    /* client: what it sends, writes and reads into */
    DAT_RMR_HANDLE rmr;
    DAT_RMR_CONTEXT window;
};

static DAT_EP_ATTR link_attr(void) {
    DAT_EP_ATTR a = h_ep_attr(8, REQS, IOV, 2, 2);
    a.max_message_size = MAX_MSG;
    return a;
}

static DAT_DTO_COOKIE cookie(uint64_t v) {
    DAT_DTO_COOKIE c;
    c.as_64 = v;
    return c;
}

static DAT_RETURN post_recv(struct link* l, int slot) {
    DAT_LMR_TRIPLET iov = h_iov(&l->rbuf, (DAT_VLEN)slot * 1024, 1024);
    return dat_ep_post_recv(l->sep, 1, &iov, cookie(0x7000 + (uint64_t)slot),
                            DAT_COMPLETION_DEFAULT_FLAG);
}

/* The EPs connected, two receives posted on the server and its window bound over `target`
 * (filled with 0xa5). Returns 0 on success (a failure is recorded). */
static int link_up(struct h_pair* p, struct link* l) {
    memset(l, 0, sizeof *l);
    DAT_EP_ATTR a = link_attr();
    DAT_RETURN ret;
#define SETUP(call, what)                    \
    if ((ret = (call)) != DAT_SUCCESS) {     \
        h_fail(__LINE__, "%s: %s", what, h_str(ret)); \
        return -1;                           \
    }
    SETUP(h_ep(&p->srv, &a, &l->sep), "dat_ep_create (server)");
    SETUP(h_ep(&p->cli, &a, &l->cep), "dat_ep_create (client)");
    SETUP(h_mem(&p->srv, DAT_HANDLE_NULL, WINDOW, DAT_MEM_PRIV_ALL_FLAG, &l->target), "lmr (target)");
    SETUP(h_mem(&p->srv, DAT_HANDLE_NULL, 4 * 1024, DAT_MEM_PRIV_ALL_FLAG, &l->rbuf), "lmr (recv)");
    SETUP(h_mem(&p->cli, DAT_HANDLE_NULL, 2 * MAX_MSG, DAT_MEM_PRIV_ALL_FLAG, &l->src), "lmr (src)");
    memset(l->target.buf, 0xa5, WINDOW);
    for (int i = 0; i < 2 * MAX_MSG; ++i) l->src.buf[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 2; ++i) SETUP(post_recv(l, i), "dat_ep_post_recv");
    SETUP(h_connect(p, l->sep, l->cep), "connect");
    SETUP(rmr_create_for_ep(p->srv.pz, &l->rmr), "dat_rmr_create_for_ep");
    DAT_LMR_TRIPLET t = h_iov(&l->target, 0, WINDOW);
    DAT_RMR_COOKIE rc;
    rc.as_64 = 0xb1d;
    SETUP(dat_rmr_bind(l->rmr, l->target.lmr, &t,
                       DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
                       DAT_VA_TYPE_VA, l->sep, rc, DAT_COMPLETION_DEFAULT_FLAG, &l->window),
          "dat_rmr_bind");
    DAT_EVENT ev;
    SETUP(h_expect_event(p->srv.req_evd, DAT_RMR_BIND_COMPLETION_EVENT, NULL, &ev),
          "the bind's completion");
    if (ev.event_data.rmr_completion_event_data.status != DAT_RMR_BIND_SUCCESS) {
        h_fail(__LINE__, "bind completed with status %d",
               ev.event_data.rmr_completion_event_data.status);
        return -1;
    }
#undef SETUP
    return 0;
}

static void link_down(struct h_pair* p, struct link* l) {
    if (l->sep != DAT_HANDLE_NULL && l->cep != DAT_HANDLE_NULL) {
        DAT_EP_STATE st;
        DAT_BOOLEAN ri, qi;
        if (dat_ep_get_status(l->cep, &st, &ri, &qi) == DAT_SUCCESS &&
            st == DAT_EP_STATE_CONNECTED)
            h_disconnect(p, l->cep, &p->cli, l->sep, &p->srv);
        else
            dat_ep_disconnect(l->cep, DAT_CLOSE_ABRUPT_FLAG);
        dat_ep_disconnect(l->sep, DAT_CLOSE_ABRUPT_FLAG);
    }
    if (l->rmr != DAT_HANDLE_NULL) dat_rmr_free(l->rmr);
    if (l->cep != DAT_HANDLE_NULL) dat_ep_free(l->cep);
    if (l->sep != DAT_HANDLE_NULL) dat_ep_free(l->sep);
    h_mem_free(&l->target);
    h_mem_free(&l->rbuf);
    h_mem_free(&l->src);
}

static DAT_RETURN send_inv(struct link* l, DAT_VLEN off, DAT_VLEN len, uint64_t ck,
                           DAT_COMPLETION_FLAGS flags) {
    DAT_LMR_TRIPLET iov = h_iov(&l->src, off, len);
    return post_send_with_invalidate(l->cep, 1, &iov, cookie(ck), flags, DAT_TRUE,
                                            l->window);
}

/* The server's next receive is the client's message at `off`, reported as a receive with
 * invalidate of the window. */
static void expect_invalidating_receive(struct h_pair* p, struct link* l, DAT_VLEN off, int slot) {
    DAT_EVENT ev;
    REQUIRE_OK(h_expect_event(p->srv.rcv_evd, DAT_DTO_COMPLETION_EVENT, NULL, &ev),
               "the server's receive");
    const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev.event_data.dto_completion_event_data;
    REQUIRE(d->status == DAT_DTO_SUCCESS, "receive completed with status %d", d->status);
    EXPECT(d->user_cookie.as_64 == 0x7000 + (uint64_t)slot, "receive cookie 0x%llx",
           (unsigned long long)d->user_cookie.as_64);
    EXPECT(d->operation == DAT_DTO_RECEIVE_WITH_INVALIDATE,
           "receive reported as operation %d, want DAT_DTO_RECEIVE_WITH_INVALIDATE (%d)",
           d->operation, DAT_DTO_RECEIVE_WITH_INVALIDATE);
    EXPECT(d->rmr_context == l->window, "invalidated RMR context 0x%x, want the window's 0x%x",
           d->rmr_context, l->window);
    EXPECT(d->transfered_length == MSG, "received %u bytes, want %d",
           (unsigned)d->transfered_length, MSG);
    EXPECT(memcmp(l->rbuf.buf + slot * 1024, l->src.buf + off, MSG) == 0,
           "the received bytes differ from the sent ones");
}

/* The client writes through the invalidated window: the write fails, the connection breaks
 * on both sides, and the target is untouched. */
/* The EP's connection ends: BROKEN when its own QP's failure came first, DISCONNECTED when
   the peer's disconnect (its QP failed on the same error) came first. Either says the error
   was fatal to the connection; which one wins is a race of the two sides. */
static void expect_connection_end(DAT_EVD_HANDLE evd, const char* who) {
    DAT_EVENT ev;
    REQUIRE_OK(h_wait(evd, &ev), who);
    REQUIRE(ev.event_number == DAT_CONNECTION_EVENT_BROKEN ||
                ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED,
            "%s: event %#x, not its end", who, (unsigned)ev.event_number);
}

static void expect_window_dead(struct h_pair* p, struct link* l) {
    DAT_LMR_TRIPLET iov = h_iov(&l->src, 0, MSG);
    DAT_RMR_TRIPLET r;
    r.virtual_address = (DAT_VADDR)(uintptr_t)l->target.buf;
    r.segment_length = MSG;
    r.rmr_context = l->window;
    REQUIRE_OK(dat_ep_post_rdma_write(l->cep, 1, &iov, cookie(0xdead), &r,
                                      DAT_COMPLETION_DEFAULT_FLAG),
               "dat_ep_post_rdma_write through the invalidated window");
    DAT_EVENT ev;
    REQUIRE_OK(h_expect_event(p->cli.req_evd, DAT_DTO_COMPLETION_EVENT, NULL, &ev),
               "the write's completion");
    const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev.event_data.dto_completion_event_data;
    EXPECT(d->user_cookie.as_64 == 0xdead, "completion of cookie 0x%llx",
           (unsigned long long)d->user_cookie.as_64);
    /* RoCE's write completes on the peer's answer, here its NAK. An iWARP write completes
     * once TCP took it, as on any iWARP RNIC, so it may succeed (or be flushed when the
     * peer's Terminate came first); the connection's end below is the rule there. */
    if (!p->iwarp)
        EXPECT(d->status != DAT_DTO_SUCCESS, "a write through an invalidated window succeeded");
    expect_connection_end(p->cli.conn_evd, "the client's connection");
    expect_connection_end(p->srv.conn_evd, "the server's connection");
    for (int i = 0; i < WINDOW; ++i)
        REQUIRE(l->target.buf[i] == 0xa5, "target byte %d changed to 0x%02x", i, l->target.buf[i]);
}

/* ---- rules ---- */

static void peer_sees_invalidate_then_receive(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        REQUIRE_OK(send_inv(&l, 0, MSG, 1, DAT_COMPLETION_DEFAULT_FLAG), "send with invalidate");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the send's completion");
        expect_invalidating_receive(p, &l, 0, 0);
    }
    link_down(p, &l);
}

static void use_of_invalidated_window_is_fatal(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        /* The window works before: a write through it lands. */
        DAT_LMR_TRIPLET iov = h_iov(&l.src, 0, 16);
        DAT_RMR_TRIPLET r = {(DAT_VADDR)(uintptr_t)l.target.buf + 128, 16, l.window};
        REQUIRE_OK(dat_ep_post_rdma_write(l.cep, 1, &iov, cookie(2), &r,
                                          DAT_COMPLETION_DEFAULT_FLAG),
                   "dat_ep_post_rdma_write");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the write's completion");
        REQUIRE(h_wait_bytes(l.target.buf + 128, l.src.buf, 16), "the write did not land");
        memset(l.target.buf + 128, 0xa5, 16);
        REQUIRE_OK(send_inv(&l, 0, MSG, 3, DAT_COMPLETION_DEFAULT_FLAG), "send with invalidate");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the send's completion");
        expect_invalidating_receive(p, &l, 0, 0);
        expect_window_dead(p, &l);
    }
    link_down(p, &l);
}

/* SILENT_SUCCESS: the send completes nothing; the next, signalled, send's completion is the
 * only event, and the peer still sees the invalidate and the receive. */
static void silent_success_no_completion(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        REQUIRE_OK(send_inv(&l, 0, MSG, 4, DAT_COMPLETION_SUPPRESS_FLAG),
                   "send with invalidate, suppressed");
        expect_invalidating_receive(p, &l, 0, 0);
        REQUIRE_OK(h_post_send(l.cep, &l.src, MSG, MSG, 5), "a signalled send");
        DAT_EVENT ev;
        REQUIRE_OK(h_expect_event(p->cli.req_evd, DAT_DTO_COMPLETION_EVENT, NULL, &ev),
                   "a send completion");
        EXPECT(ev.event_data.dto_completion_event_data.user_cookie.as_64 == 5,
               "completion of cookie 0x%llx: the suppressed send completed",
               (unsigned long long)ev.event_data.dto_completion_event_data.user_cookie.as_64);
        EXPECT(h_empty(p->cli.req_evd), "more request completions than the signalled send's");
    }
    link_down(p, &l);
}

/* READ_FENCE: an RDMA Read through the window, then the fenced send that invalidates it; the
 * read completes first with the window's bytes, then the send, then the peer's receive. */
static void read_fence_after_read_through_window(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        for (int i = 0; i < MSG; ++i) l.target.buf[i] = (unsigned char)(0x30 + i);
        DAT_LMR_TRIPLET iov = h_iov(&l.src, MAX_MSG, MSG);
        DAT_RMR_TRIPLET r = {(DAT_VADDR)(uintptr_t)l.target.buf, MSG, l.window};
        REQUIRE_OK(dat_ep_post_rdma_read(l.cep, 1, &iov, cookie(6), &r,
                                         DAT_COMPLETION_DEFAULT_FLAG),
                   "dat_ep_post_rdma_read");
        REQUIRE_OK(send_inv(&l, 0, MSG, 7, DAT_COMPLETION_BARRIER_FENCE_FLAG),
                   "fenced send with invalidate");
        for (uint64_t want = 6; want <= 7; ++want) {
            DAT_EVENT ev;
            REQUIRE_OK(h_expect_event(p->cli.req_evd, DAT_DTO_COMPLETION_EVENT, NULL, &ev),
                       "a request completion");
            const DAT_DTO_COMPLETION_EVENT_DATA* d = &ev.event_data.dto_completion_event_data;
            REQUIRE(d->user_cookie.as_64 == want, "completion of cookie %llu, want %llu",
                    (unsigned long long)d->user_cookie.as_64, (unsigned long long)want);
            REQUIRE(d->status == DAT_DTO_SUCCESS, "cookie %llu completed with status %d",
                    (unsigned long long)want, d->status);
        }
        REQUIRE(memcmp(l.src.buf + MAX_MSG, l.target.buf, MSG) == 0,
                "the read did not return the window's bytes");
        expect_invalidating_receive(p, &l, 0, 0);
    }
    link_down(p, &l);
}

/* SEND_AND_SOLICIT_EVENT: the flag is taken and the message arrives as a receive with
 * invalidate, like any other. */
static void solicit_event_flag_delivers_and_invalidates(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        REQUIRE_OK(send_inv(&l, 0, MSG, 8, DAT_COMPLETION_SOLICITED_WAIT_FLAG),
                   "solicited send with invalidate");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the send's completion");
        expect_invalidating_receive(p, &l, 0, 0);
        expect_window_dead(p, &l);
    }
    link_down(p, &l);
}

static void not_connected_invalid_state(struct h_pair* p) {
    DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
    struct h_mem m;
    DAT_EP_ATTR a = link_attr();
    REQUIRE_OK(h_ep(&p->cli, &a, &ep), "dat_ep_create");
    if (h_mem(&p->cli, DAT_HANDLE_NULL, 4096, DAT_MEM_PRIV_ALL_FLAG, &m) == DAT_SUCCESS) {
        DAT_LMR_TRIPLET iov = h_iov(&m, 0, MSG);
        DAT_RETURN ret = post_send_with_invalidate(ep, 1, &iov, cookie(9),
                                                          DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE,
                                                          0x1234);
        EXPECT_TYPE(ret, DAT_INVALID_STATE, "send with invalidate on an unconnected EP");
        EXPECT(h_empty(p->cli.req_evd), "a completion for a refused send");
        h_mem_free(&m);
    } else {
        h_fail(__LINE__, "lmr");
    }
    dat_ep_free(ep);
}

/* Too large: more than the EP's max_message_size. The connection stays up and the window
 * alive: a send that fits invalidates it afterwards. */
static void too_large_length_error(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        DAT_LMR_TRIPLET iov = h_iov(&l.src, 0, MAX_MSG + 1);
        DAT_RETURN ret = post_send_with_invalidate(
            l.cep, 1, &iov, cookie(10), DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE, l.window);
        EXPECT_TYPE(ret, DAT_LENGTH_ERROR, "send with invalidate over max_message_size");
        REQUIRE_OK(send_inv(&l, 0, MSG, 11, DAT_COMPLETION_DEFAULT_FLAG),
                   "send with invalidate that fits");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the send's completion");
        expect_invalidating_receive(p, &l, 0, 0);
    }
    link_down(p, &l);
}

/* Too many outstanding: REQS posted and not reaped fill the request queue; one more is
 * refused with DAT_INSUFFICIENT_RESOURCES and leaves no trace. */
static void too_many_outstanding_insufficient_resources(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        for (int i = 2; i < REQS; ++i) REQUIRE_OK(post_recv(&l, i), "dat_ep_post_recv");
        for (int i = 0; i < REQS; ++i)
            REQUIRE_OK(h_post_send(l.cep, &l.src, 0, MSG, 20 + (uint64_t)i), "a send");
        DAT_RETURN ret = send_inv(&l, 0, MSG, 30, DAT_COMPLETION_DEFAULT_FLAG);
        EXPECT_TYPE(ret, DAT_INSUFFICIENT_RESOURCES, "send with invalidate beyond max_request_dtos");
        REQUIRE_OK(h_reap_sends(&p->cli, REQS), "the sends' completions");
        for (int i = 0; i < REQS; ++i) {
            DAT_EVENT ev;
            REQUIRE_OK(h_expect_event(p->srv.rcv_evd, DAT_DTO_COMPLETION_EVENT, NULL, &ev),
                       "a receive");
            EXPECT(ev.event_data.dto_completion_event_data.operation == DAT_DTO_RECEIVE,
                   "receive %d reported as operation %d: the refused send invalidated", i,
                   ev.event_data.dto_completion_event_data.operation);
        }
        REQUIRE_OK(post_recv(&l, 0), "dat_ep_post_recv");
        REQUIRE_OK(send_inv(&l, 0, MSG, 31, DAT_COMPLETION_DEFAULT_FLAG),
                   "send with invalidate once there is room");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the send's completion");
        expect_invalidating_receive(p, &l, 0, 0);
    }
    link_down(p, &l);
}

/* Too many segments: more than the EP's max_request_iov. */
static void too_many_segments_invalid_parameter(struct h_pair* p) {
    struct link l;
    if (link_up(p, &l) == 0) {
        DAT_LMR_TRIPLET iov[IOV + 1];
        for (int i = 0; i <= IOV; ++i) iov[i] = h_iov(&l.src, (DAT_VLEN)i * 16, 16);
        DAT_RETURN ret = post_send_with_invalidate(
            l.cep, IOV + 1, iov, cookie(40), DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE, l.window);
        EXPECT_TYPE(ret, DAT_INVALID_PARAMETER, "send with invalidate over max_request_iov");
        REQUIRE_OK(send_inv(&l, 0, MSG, 41, DAT_COMPLETION_DEFAULT_FLAG),
                   "send with invalidate of IOV segments or fewer");
        REQUIRE_OK(h_reap_sends(&p->cli, 1), "the send's completion");
        expect_invalidating_receive(p, &l, 0, 0);
    }
    link_down(p, &l);
}

int main(int argc, char** argv) {
    struct h_pair p;
    h_init(argc, argv, &p);
    H_RULE("send_invalidate_peer_sees_invalidate_then_receive", peer_sees_invalidate_then_receive,
           &p);
    H_RULE("send_invalidate_use_of_invalidated_window_is_fatal",
           use_of_invalidated_window_is_fatal, &p);
    H_RULE("send_invalidate_silent_success_no_completion", silent_success_no_completion, &p);
    H_RULE("send_invalidate_read_fence_after_read_through_window",
           read_fence_after_read_through_window, &p);
    H_RULE("send_invalidate_solicit_event_delivers_and_invalidates",
           solicit_event_flag_delivers_and_invalidates, &p);
    H_RULE("send_invalidate_not_connected_invalid_state", not_connected_invalid_state, &p);
    H_RULE("send_invalidate_too_large_length_error", too_large_length_error, &p);
    H_RULE("send_invalidate_too_many_outstanding_insufficient_resources",
           too_many_outstanding_insufficient_resources, &p);
    H_RULE("send_invalidate_too_many_segments_invalid_parameter",
           too_many_segments_invalid_parameter, &p);
    return h_finish(&p);
}
