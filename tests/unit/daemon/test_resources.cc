// snicd's resource tables without DPDK: the daemon-wide key and QP number spaces, the
// per-session handles, the limits, and client sessions driven op by op with real memfds
// and rings formatted as libsnic formats them.
#include "daemon/verbs/resources.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "daemon/roce/roce_rules.h"
#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/limits.h"
#include "daemon/verbs/session.h"
#include "shm/ring.h"
#include "shm/wqe.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon {
namespace {

using shm::Handle;
using shm::kNoHandle;
using shm::ObjKind;
using namespace fixture;

// ---- name tables --------------------------------------------------------------------

TEST(NameTable, key_generation_byte_changes_on_reuse) {
    NameTable keys(1, kKeyFormat, 1);
    int obj = 0;
    const std::uint32_t k1 = keys.acquire(&obj, NameTable::kMr);
    keys.release(k1);
    const std::uint32_t k2 = keys.acquire(&obj, NameTable::kMr);
    EXPECT_EQ(keys.index_of(k1), keys.index_of(k2));  // same slot
    EXPECT_EQ(k2 & 0xff, (k1 & 0xff) == 0xff ? 1 : (k1 & 0xff) + 1);
    EXPECT_EQ(keys.lookup(k1, NameTable::kMr), nullptr);  // the stale key misses
    EXPECT_EQ(keys.lookup(k2, NameTable::kMr), &obj);
}

TEST(NameTable, generation_never_zero_so_no_key_is_zero) {
    NameTable keys(1, kKeyFormat, 2);
    std::set<std::uint32_t> generations;
    for (int i = 0; i < 600; ++i) {
        const std::uint32_t k = keys.acquire(&keys);
        ASSERT_NE(k, 0u);
        ASSERT_NE(k & 0xff, 0u);
        generations.insert(k & 0xff);
        keys.release(k);
    }
    EXPECT_EQ(generations.size(), 255u);  // every generation 1..255 in turn
}

TEST(NameTable, freed_slots_are_reused_oldest_first) {
    NameTable qpns(4, kQpnFormat, 3);
    int a = 0;
    const std::uint32_t q1 = qpns.acquire(&a);
    qpns.release(q1);
    // The other three slots come first: a QP number does not return right away.
    std::set<std::uint32_t> slots;
    for (int i = 0; i < 3; ++i) slots.insert(qpns.index_of(qpns.acquire(&a)));
    EXPECT_EQ(slots.size(), 3u);
    EXPECT_EQ(slots.count(qpns.index_of(q1)), 0u);
    const std::uint32_t q2 = qpns.acquire(&a);
    EXPECT_EQ(qpns.index_of(q2), qpns.index_of(q1));
    EXPECT_NE(q2, q1);  // and under another generation
}

TEST(NameTable, a_freed_name_comes_back_only_after_its_generations_went_round) {
    NameTable qpns(1, kQpnFormat, 4);  // one slot: every QP number is that slot's
    int a = 0;
    std::set<std::uint32_t> names;
    for (int i = 0; i < 1023; ++i) {
        const std::uint32_t q = qpns.acquire(&a);
        ASSERT_TRUE(names.insert(q).second) << "QP number " << q << " again after " << i;
        qpns.release(q);
    }
}

TEST(NameTable, qp_numbers_are_24_bits_never_0_1_or_0xffffff) {
    NameTable qpns(16384, kQpnFormat, 5);
    int a = 0;
    for (int i = 0; i < 3 * 16384; ++i) {
        const std::uint32_t q = qpns.acquire(&a);
        ASSERT_GE(q, 2u);
        ASSERT_LT(q, 0xffffffu);
        qpns.release(q);
    }
}

TEST(NameTable, no_name_is_all_ones) {
    // A 2-bit slot field and 2-bit generations: every slot's generations go round many
    // times, and name 0xf (all ones) is skipped, not handed out.
    constexpr NameFormat tiny{0, 2, 2};
    NameTable t(4, tiny, 13);
    int a = 0;
    std::set<std::uint32_t> names;
    for (int i = 0; i < 400; ++i) {
        const std::uint32_t n = t.acquire(&a);
        ASSERT_NE(n, 0xfu);
        ASSERT_NE(n, 0u);
        names.insert(n);
        t.release(n);
    }
    EXPECT_EQ(names.size(), 11u);  // 4 slots x 3 generations, less 0xf
}

TEST(NameTable, full_table_gives_no_name) {
    NameTable t(2, kSrqnFormat, 6);
    int a = 0;
    EXPECT_NE(t.acquire(&a), 0u);
    EXPECT_NE(t.acquire(&a), 0u);
    EXPECT_EQ(t.acquire(&a), 0u);
    EXPECT_EQ(t.live(), 2u);
}

TEST(NameTable, lookup_checks_kind_range_and_stray_bits) {
    NameTable keys(5, kKeyFormat, 7);  // indices 0..4 in 3 bits
    int mw = 0;
    const std::uint32_t k = keys.acquire(&mw, NameTable::kMw);
    EXPECT_EQ(keys.lookup(k, NameTable::kMw), &mw);
    EXPECT_EQ(keys.lookup(k, NameTable::kMr), nullptr);  // an MW key is not an MR key
    EXPECT_EQ(keys.lookup((k & ~(7u << 8)) | (6u << 8), NameTable::kMw), nullptr);  // index 6
    EXPECT_EQ(keys.lookup(k ^ (1u << 11), NameTable::kMw), nullptr);                // another tag
    EXPECT_EQ(keys.lookup(0, NameTable::kMw), nullptr);
    NameTable qpns(4, kQpnFormat, 8);
    const std::uint32_t q = qpns.acquire(&mw);
    EXPECT_EQ(qpns.lookup(q), &mw);
    EXPECT_EQ(qpns.lookup(q | (1u << 24)), nullptr);
    EXPECT_EQ(qpns.lookup(q ^ (1u << 13)), nullptr);  // another tag
}

TEST(NameTable, lookup_by_slot_ignores_the_key_byte_but_not_the_rest) {
    NameTable keys(1024, kKeyFormat, 9);
    int a = 0, b = 0;
    const std::uint32_t ka = keys.acquire(&a, NameTable::kMw);
    const std::uint32_t kb = keys.acquire(&b, NameTable::kMw);
    ASSERT_LT(keys.index_of(ka), keys.capacity());
    ASSERT_NE(keys.index_of(ka), keys.index_of(kb));
    for (std::uint32_t byte = 0; byte < 256; ++byte) {  // every key byte a bind may choose
        EXPECT_EQ(keys.lookup_slot((ka & ~0xffu) | byte, NameTable::kMw), &a);
        EXPECT_EQ(keys.lookup_slot((kb & ~0xffu) | byte, NameTable::kMw), &b);
    }
    EXPECT_EQ(keys.lookup_slot(ka ^ (1u << 31), NameTable::kMw), nullptr);  // another tag
    EXPECT_EQ(keys.lookup_slot(ka, NameTable::kMr), nullptr);
    keys.release(ka);
    EXPECT_EQ(keys.lookup_slot(ka, NameTable::kMw), nullptr);
}

TEST(NameTable, lease_releases_its_name) {
    NameTable t(2, kKeyFormat, 10);
    int a = 0;
    std::uint32_t k;
    {
        NameLease lease(t, k = t.acquire(&a));
        EXPECT_EQ(t.lookup(k), &a);
    }
    EXPECT_EQ(t.lookup(k), nullptr);
    EXPECT_EQ(t.live(), 0u);
}

// ---- unpredictable names: a forger who cannot see the traffic must guess them -------

// The first `n` names a table seeded with `seed` hands out.
std::vector<std::uint32_t> first_names(std::uint32_t slots, NameFormat f, std::uint64_t seed,
                                       int n) {
    NameTable t(slots, f, seed);
    std::vector<std::uint32_t> names;
    for (int i = 0; i < n; ++i) names.push_back(t.acquire(&t));
    return names;
}

TEST(NameTable, differently_seeded_tables_hand_out_different_first_names) {
    for (const auto& [slots, format] : {std::pair{1024u, kQpnFormat}, std::pair{66560u, kKeyFormat},
                                        std::pair{256u, kSrqnFormat}}) {
        EXPECT_NE(first_names(slots, format, 1, 1), first_names(slots, format, 2, 1));
        EXPECT_EQ(first_names(slots, format, 1, 8), first_names(slots, format, 1, 8));
    }
}

TEST(NameTable, first_qp_numbers_and_keys_spread_over_all_their_bits) {
    // The first name of 256 tables seeded 0..255 (the daemon's sizes): no two alike, and
    // each bit both set and clear among them. Key bit 24 is index bit 16, which only the
    // last 1024 of the 66560 slots have.
    std::set<std::uint32_t> qpns, keys;
    std::uint32_t qpn_or = 0, qpn_and = ~0u, key_or = 0, key_and = ~0u;
    for (std::uint64_t seed = 0; seed < 256; ++seed) {
        const std::uint32_t q = first_names(1024, kQpnFormat, seed, 1)[0];
        const std::uint32_t k = first_names(66560, kKeyFormat, seed, 1)[0];
        qpns.insert(q);
        keys.insert(k);
        qpn_or |= q, qpn_and &= q, key_or |= k, key_and &= k;
    }
    EXPECT_EQ(qpns.size(), 256u);
    EXPECT_EQ(keys.size(), 256u);
    EXPECT_EQ(qpn_or, 0xffffffu);
    EXPECT_EQ(qpn_and, 0u);
    EXPECT_EQ(key_or | (1u << 24), 0xffffffffu);
    EXPECT_EQ(key_and, 0u);
}

TEST(NameTable, the_first_names_are_not_in_slot_order) {
    // Consecutive names of one table do not name consecutive slots.
    NameTable qpns(1024, kQpnFormat, 11);
    int steps_of_one = 0;
    std::uint32_t prev = qpns.index_of(qpns.acquire(&qpns));
    for (int i = 0; i < 100; ++i) {
        const std::uint32_t index = qpns.index_of(qpns.acquire(&qpns));
        steps_of_one += index == prev + 1;
        prev = index;
    }
    EXPECT_LT(steps_of_one, 5);
}

TEST(NameTable, names_stay_unique_over_many_alloc_free_cycles) {
    // The daemon's QP table, filled and drained at random: live numbers never collide, nor
    // do their low 14 bits (the transport's slot), and each resolves to its own object.
    NameTable qpns(1024, kQpnFormat, 12);
    struct Live {
        std::uint32_t name;
        const int* obj;
    };
    std::vector<Live> live;
    std::vector<int> objs(1024);
    std::vector<const int*> spare;
    for (const int& o : objs) spare.push_back(&o);
    std::set<std::uint32_t> names, low_bits;
    std::uint64_t r = 12345;  // a small LCG choosing the operations
    auto rnd = [&r] {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        return r >> 33;
    };
    for (int op = 0; op < 200000; ++op) {
        if (!spare.empty() && (live.empty() || rnd() % 3 != 0)) {
            const int* obj = spare.back();
            spare.pop_back();
            const std::uint32_t q = qpns.acquire(obj);
            ASSERT_NE(q, 0u);
            ASSERT_TRUE(names.insert(q).second) << "QP number " << q << " is live already";
            ASSERT_TRUE(low_bits.insert(q & 0x3fff).second) << "low bits of " << q << " taken";
            live.push_back({q, obj});
        } else {
            const std::size_t i = rnd() % live.size();
            qpns.release(live[i].name);
            EXPECT_EQ(qpns.lookup(live[i].name), nullptr);
            names.erase(live[i].name);
            low_bits.erase(live[i].name & 0x3fff);
            spare.push_back(live[i].obj);
            live[i] = live.back();
            live.pop_back();
        }
        if (op % 1000 != 0) continue;
        for (const Live& l : live) {
            ASSERT_EQ(qpns.lookup(l.name), l.obj);
        }
    }
    EXPECT_EQ(qpns.live(), live.size());
}

TEST(Resources, each_start_seeds_its_tables_afresh) {
    EXPECT_NE(random_seed(), random_seed());
    Resources a(kLimits, 1), b(kLimits, 2), c(kLimits, 1), d, e;
    int obj = 0;
    auto first = [&obj](Resources& r) {
        return std::array{r.qpns().acquire(&obj), r.keys().acquire(&obj), r.srqns().acquire(&obj)};
    };
    const auto fa = first(a), fb = first(b), fc = first(c);
    EXPECT_EQ(fa, fc);  // the same seed names alike
    for (std::size_t i = 0; i < fa.size(); ++i) EXPECT_NE(fa[i], fb[i]) << i;
    EXPECT_NE(first(d), first(e));  // seeded by getrandom(2): 2^-60 that they agree
}

// ---- handles --------------------------------------------------------------------

struct Obj {
    Handle handle = kNoHandle;
    int value = 0;
};

TEST(HandleTable, stale_handle_refused_after_destroy) {
    HandleTable<Obj> t;
    const Handle h = t.insert(std::make_unique<Obj>());
    ASSERT_NE(t.find(h), nullptr);
    EXPECT_EQ(t.find(h)->handle, h);
    EXPECT_NE(t.take(h), nullptr);
    EXPECT_EQ(t.find(h), nullptr);
    EXPECT_EQ(t.take(h), nullptr);
    const Handle h2 = t.insert(std::make_unique<Obj>());
    EXPECT_EQ(h2 & 0xffff, h & 0xffff);  // slot reused
    EXPECT_NE(h2, h);                    // under a new generation
    EXPECT_EQ(t.find(h), nullptr);
}

TEST(HandleTable, handles_are_never_zero_or_none_and_foreign_ones_miss) {
    HandleTable<Obj> t;
    std::vector<Handle> hs;
    for (int i = 0; i < 100; ++i) hs.push_back(t.insert(std::make_unique<Obj>()));
    for (Handle h : hs) {
        EXPECT_NE(h, 0u);
        EXPECT_NE(h, kNoHandle);
    }
    EXPECT_EQ(t.find(0), nullptr);
    EXPECT_EQ(t.find(kNoHandle), nullptr);
    EXPECT_EQ(t.find(hs[5] + (1u << 16)), nullptr);  // right index, wrong generation
    EXPECT_EQ(t.find(1000 | (1u << 16)), nullptr);   // index never used
}

TEST(HandleTable, objects_never_move) {
    HandleTable<Obj> t;
    const Handle first = t.insert(std::make_unique<Obj>());
    const Obj* p = t.find(first);
    for (int i = 0; i < 1000; ++i) t.insert(std::make_unique<Obj>());
    EXPECT_EQ(t.find(first), p);
}

// ---- limits and counts ------------------------------------------------------------

constexpr Limits small_limits() {
    Limits l = kLimits;
    l.objects[static_cast<std::size_t>(ObjKind::pd)] = {2, 3};
    l.objects[static_cast<std::size_t>(ObjKind::qp)] = {2, 4};
    return l;
}

TEST(Resources, per_client_and_per_daemon_limits) {
    Resources r(small_limits());
    Counts a{}, b{};
    EXPECT_TRUE(r.reserve(ObjKind::pd, a, 0));
    EXPECT_TRUE(r.reserve(ObjKind::pd, a, 0));
    EXPECT_FALSE(r.reserve(ObjKind::pd, a, 0));  // per client
    EXPECT_TRUE(r.reserve(ObjKind::pd, b, 0));
    EXPECT_FALSE(r.reserve(ObjKind::pd, b, 0));  // per daemon
    EXPECT_EQ(r.count(ObjKind::pd), 3u);
    r.release(ObjKind::pd, a, 0);
    EXPECT_TRUE(r.reserve(ObjKind::pd, b, 0));
    EXPECT_EQ(b[static_cast<std::size_t>(ObjKind::pd)], 2u);
}

// The review's case: one user's clients (16 sessions of 1,024 PDs, 2 of 8,192 QPs) took the
// daemon's whole table and every other user, root included, got ENOMEM. A user other than
// root now stops at half the table, users together leave root its sixteenth, and root is
// bound by the table alone.
TEST(Resources, a_user_holds_its_share_of_a_table_and_root_keeps_its_reserve) {
    Resources r;  // the daemon's limits: QPs 8,192 per client, 16,384 in all
    const KindLimit qp = kLimits.of(ObjKind::qp);
    Counts s1{}, s2{}, s3{}, other{}, root{};
    std::uint32_t got = 0;
    for (Counts* s : {&s1, &s2, &s3})
        while (r.reserve(ObjKind::qp, *s, 1000)) ++got;
    EXPECT_EQ(got, qp.per_uid()) << "uid 1000's three sessions stop at its share";
    EXPECT_EQ(r.count_of_uid(ObjKind::qp, 1000), qp.per_uid());
    got = 0;
    while (r.reserve(ObjKind::qp, other, 2000)) ++got;
    EXPECT_EQ(got, qp.per_daemon - qp.root_reserve() - qp.per_uid())
        << "a second user gets what is left but root's reserve";
    got = 0;
    while (r.reserve(ObjKind::qp, root, 0)) ++got;
    EXPECT_EQ(got, qp.root_reserve()) << "root takes its reserve, and it alone";
    EXPECT_EQ(r.count(ObjKind::qp), qp.per_daemon);
    // Users other than root hold more than the table less root's reserve (root took its
    // reserve after them): one freed is root's alone until they drop below that.
    r.release(ObjKind::qp, s1, 1000);
    EXPECT_EQ(r.count_of_uid(ObjKind::qp, 1000), qp.per_uid() - 1);
    EXPECT_FALSE(r.reserve(ObjKind::qp, other, 2000));
    EXPECT_FALSE(r.reserve(ObjKind::qp, s2, 1000));
    EXPECT_TRUE(r.reserve(ObjKind::qp, root, 0));
}

TEST(Resources, device_limits_are_the_contract) {
    const shm::DeviceLimits d = device_limits(kLimits, 0);
    EXPECT_EQ(d.max_pd, 1024u);
    EXPECT_EQ(d.max_mr, 4096u);
    EXPECT_EQ(d.max_mw, 1024u);
    EXPECT_EQ(d.max_channels, 64u);
    EXPECT_EQ(d.max_cq, 1024u);
    EXPECT_EQ(d.max_srq, 256u);
    EXPECT_EQ(d.max_qp, 8192u);
    EXPECT_EQ(d.max_qp_wr, 16384u);
    EXPECT_EQ(d.max_cqe, 4194303u);
    EXPECT_EQ(d.max_srq_wr, 16384u);
    EXPECT_EQ(d.max_sge, 16u);
    EXPECT_EQ(d.max_sge_rd, 16u);
    EXPECT_EQ(d.max_inline_data, 256u);
    EXPECT_EQ(d.max_qp_rd_atom, 128u);
    EXPECT_EQ(d.max_qp_init_rd_atom, 128u);
    EXPECT_EQ(d.max_mr_size, std::uint64_t{1} << 40);
    EXPECT_EQ(d.page_size_cap, 4096u);
    EXPECT_EQ(d.atomic_cap, std::uint32_t{IBV_ATOMIC_HCA});
    EXPECT_EQ(d.max_pkeys, 1u);
    EXPECT_EQ(d.local_ca_ack_delay, 8u);
    EXPECT_EQ(d.device_cap_flags,
              std::uint32_t{IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW |
                            IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS |
                            IBV_DEVICE_SRQ_RESIZE});
    const Resources r;
    EXPECT_EQ(r.limits().of(ObjKind::mr).per_daemon, 65536u);
}

TEST(Port, active_mtu_is_the_largest_ib_mtu_that_fits) {
    EXPECT_EQ(active_ib_mtu(1500), std::uint32_t{IBV_MTU_1024});
    EXPECT_EQ(active_ib_mtu(9000), std::uint32_t{IBV_MTU_4096});
    EXPECT_EQ(active_ib_mtu(4096 + 60), std::uint32_t{IBV_MTU_4096});
    EXPECT_EQ(active_ib_mtu(4096 + 59), std::uint32_t{IBV_MTU_2048});
    EXPECT_EQ(active_ib_mtu(576), std::uint32_t{IBV_MTU_512});
    EXPECT_EQ(active_ib_mtu(68), std::uint32_t{IBV_MTU_256});
}

TEST(Port, node_guid_is_the_eui64_of_the_mac_in_network_order) {
    const std::uint64_t guid =
        node_guid_from_mac(net::MacAddr{{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}});
    std::uint8_t b[8];
    std::memcpy(b, &guid, 8);
    const std::uint8_t want[8] = {0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
    EXPECT_EQ(std::memcmp(b, want, 8), 0);
}

// ---- sessions -------------------------------------------------------------------------

TEST_F(SessionTest, open_device_once_with_a_notification_socket_and_a_formatted_ring) {
    Client c(resources, ports);
    EXPECT_EQ(c.open(), 0);
    EXPECT_TRUE(c.session.opened());
    EXPECT_EQ(c.open(), EINVAL);

    Client d(resources, ports);
    const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
    ClientMemfd unformatted(l.bytes);
    FdList fds = fds_of({unformatted.fd(), unformatted.fd()});  // no notification socket
    shm::OpenDeviceReply out{};
    EXPECT_EQ(d.session.open_device({0, 0}, fds, out), EINVAL);
    const int efd = ::eventfd(0, EFD_CLOEXEC);  // a client could make snicd's write block
    FdList fds1 = fds_of({efd, unformatted.fd()});
    ::close(efd);
    EXPECT_EQ(d.session.open_device({0, 0}, fds1, out), EINVAL);
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    FdList fds2 = fds_of({sv[1], unformatted.fd()});  // no ring in the memfd
    ::close(sv[0]);
    ::close(sv[1]);
    EXPECT_EQ(d.session.open_device({0, 0}, fds2, out), EINVAL);
    EXPECT_FALSE(d.session.opened());
}

TEST_F(SessionTest, mr_key_resolves_to_the_mapping_until_deregistered) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    ClientMemfd m(4 * shm::kPageSize);
    std::memcpy(m.span(100, 5).data(), "hello", 5);
    shm::RegMrReply out{};
    ASSERT_EQ(c.reg_mr(pd, m, 4 * shm::kPageSize, IBV_ACCESS_LOCAL_WRITE, out), 0);
    EXPECT_EQ(out.lkey, out.rkey);
    const auto* mr = static_cast<const Mr*>(resources.keys().lookup(out.lkey, NameTable::kMr));
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(mr, c.session.mr(out.mr));
    EXPECT_EQ(std::memcmp(mr->addr + 100, "hello", 5), 0);  // the client's bytes, shared
    mr->addr[200] = std::byte{42};
    EXPECT_EQ(m.span(200, 1)[0], std::byte{42});

    EXPECT_EQ(c.destroy_pd(pd), EBUSY);
    FdList none;
    EXPECT_EQ(c.session.dereg_mr({out.mr, 0}, none, c.none), 0);
    EXPECT_EQ(resources.keys().lookup(out.lkey, NameTable::kMr), nullptr);
    EXPECT_EQ(c.session.dereg_mr({out.mr, 0}, none, c.none), EINVAL);
    EXPECT_EQ(c.destroy_pd(pd), 0);
    EXPECT_EQ(c.destroy_pd(pd), EINVAL);
}

TEST_F(SessionTest, reg_mr_refuses_what_cannot_be_shared_or_is_inconsistent) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    shm::RegMrReply out{};
    const std::uint64_t len = 4 * shm::kPageSize;
    ClientMemfd unsealed(len, false);
    EXPECT_EQ(c.reg_mr(pd, unsealed, len, 0, out), EINVAL);
    ClientMemfd small(len - shm::kPageSize);
    EXPECT_EQ(c.reg_mr(pd, small, len, 0, out), EINVAL);
    ClientMemfd m(len);
    EXPECT_EQ(c.reg_mr(pd, m, len, IBV_ACCESS_REMOTE_WRITE, out), EINVAL);  // no local write
    EXPECT_EQ(c.reg_mr(pd, m, len, IBV_ACCESS_REMOTE_ATOMIC, out), EINVAL);
    EXPECT_EQ(c.reg_mr(pd, m, len, 1u << 15, out), EINVAL);  // unknown flag
    EXPECT_EQ(c.reg_mr(pd, m, len, IBV_ACCESS_ON_DEMAND, out), EINVAL);
    EXPECT_EQ(c.reg_mr(pd, m, 0, 0, out), EINVAL);
    EXPECT_EQ(c.reg_mr(pd + (1u << 16), m, len, 0, out), EINVAL);  // stale PD handle
    EXPECT_EQ(c.reg_mr(pd, m, len, 0, out, 100), EINVAL);          // offset not page aligned
    EXPECT_EQ(c.reg_mr(pd, m, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING, out), 0);

    // Two segments from two memfds, the range starting inside the first page.
    ClientMemfd a(shm::kPageSize), b(2 * shm::kPageSize);
    shm::RegMrReq req{};
    req.pd = pd;
    req.access = IBV_ACCESS_LOCAL_WRITE;
    req.addr = kAddr + 10;
    req.length = 2 * shm::kPageSize;
    req.nsegs = 2;
    req.segs[0] = {kAddr, shm::kPageSize, 0};
    req.segs[1] = {kAddr + shm::kPageSize, 2 * shm::kPageSize, 0};
    FdList fds = fds_of({a.fd(), b.fd()});
    ASSERT_EQ(c.session.reg_mr(req, fds, out), 0);
    const Mr* mr = c.session.mr(out.mr);
    std::memcpy(b.span(0, 3).data(), "abc", 3);
    EXPECT_EQ(std::memcmp(mr->addr + shm::kPageSize - 10, "abc", 3), 0);

    req.segs[1].addr += shm::kPageSize;  // a hole between the segments
    FdList fds2 = fds_of({a.fd(), b.fd()});
    EXPECT_EQ(c.session.reg_mr(req, fds2, out), EINVAL);
    req.segs[1].addr -= shm::kPageSize;
    FdList fds3 = fds_of({a.fd()});  // one fd for two segments
    EXPECT_EQ(c.session.reg_mr(req, fds3, out), EINVAL);
}

TEST_F(SessionTest, a_session_cannot_name_another_sessions_objects) {
    Client a(resources, ports), b(resources, ports);
    ASSERT_EQ(a.open(), 0);
    ASSERT_EQ(b.open(), 0);
    const Handle pd = a.pd();
    const Handle cq = a.cq();
    shm::CreateQpReply qp{};
    ASSERT_EQ(a.qp(pd, cq, qp), 0);
    b.pd();  // b's own objects sit at the same indices
    b.cq();
    shm::CreateQpReply out{};
    EXPECT_EQ(b.qp(pd, cq, out), 0);  // the same handle values name b's own PD and CQ...
    EXPECT_EQ(b.destroy_pd(pd), EBUSY);
    FdList none;
    shm::QueryQpReply q{};
    EXPECT_NE(out.qp_num, qp.qp_num);
    // ... and a's QP handle names nothing of b's once b's QP is gone.
    EXPECT_EQ(b.session.destroy_qp({out.qp, 0}, none, b.none), 0);
    EXPECT_EQ(b.session.query_qp({qp.qp, 0}, none, q), EINVAL);
    EXPECT_EQ(a.query(qp.qp).attr.qp_state, std::uint32_t{IBV_QPS_RESET});
}

TEST_F(SessionTest, limits_give_enomem) {
    Resources r(small_limits());
    Client a(r, ports), b(r, ports);
    ASSERT_EQ(a.open(), 0);
    ASSERT_EQ(b.open(), 0);
    FdList fds;
    shm::HandleReply out{};
    EXPECT_EQ(a.session.alloc_pd(a.none, fds, out), 0);
    EXPECT_EQ(a.session.alloc_pd(a.none, fds, out), 0);
    EXPECT_EQ(a.session.alloc_pd(a.none, fds, out), ENOMEM);  // 2 per client
    EXPECT_EQ(b.session.alloc_pd(b.none, fds, out), 0);
    EXPECT_EQ(b.session.alloc_pd(b.none, fds, out), ENOMEM);  // 3 per daemon
    EXPECT_EQ(b.destroy_pd(out.handle), 0);
    EXPECT_EQ(b.session.alloc_pd(b.none, fds, out), 0);
}

constexpr Limits few_fds() {
    Limits l = kLimits;
    l.max_fds_per_client = 3;  // the device's socket and two channels'
    l.max_fds_per_uid = 5;
    return l;
}

// Each notification socket snicd keeps counts against its client and its user before it is
// kept: past either quota the op fails with EMFILE and nothing of it is kept, mapped or
// counted; what one client gives back, another of the user may keep.
TEST_F(SessionTest, kept_descriptors_stop_at_the_client_and_user_quotas) {
    const ClientMemoryStats before = client_memory_stats();
    {
        Resources r(few_fds());
        Client a(r, ports, Peer{100, 1000, 1000});
        ASSERT_EQ(a.open(), 0);
        EXPECT_EQ(a.session.fds(), 1u);
        Handle ch0 = kNoHandle, ch1 = kNoHandle, h = kNoHandle;
        ASSERT_EQ(a.channel(ch0), 0);
        ASSERT_EQ(a.channel(ch1), 0);
        EXPECT_EQ(a.session.fds(), 3u);
        EXPECT_EQ(a.session.info().fds, 3u);
        const std::uint64_t mapped = a.session.mapped_bytes();
        const std::uint32_t mappings = client_memory_stats().mappings;
        EXPECT_EQ(a.channel(h), EMFILE);  // the client's quota
        EXPECT_EQ(a.session.fds(), 3u);
        EXPECT_EQ(a.session.mapped_bytes(), mapped);
        EXPECT_EQ(client_memory_stats().mappings, mappings);
        EXPECT_EQ(r.count(ObjKind::channel), 2u);
        EXPECT_EQ(client_memory_stats().fds, before.fds + 3);

        // A second client of the same user has what is left of the user's quota.
        Client b(r, ports, Peer{101, 1000, 1000});
        ASSERT_EQ(b.open(), 0);
        ASSERT_EQ(b.channel(h), 0);
        EXPECT_EQ(r.fds_of_uid(1000), 5u);
        EXPECT_EQ(b.channel(h), EMFILE);  // the user's quota, below the client's
        EXPECT_EQ(b.session.fds(), 2u);
        Client c(r, ports, Peer{102, 1000, 1000});
        EXPECT_EQ(c.open(), EMFILE);  // not even its device
        EXPECT_FALSE(c.session.opened());
        EXPECT_EQ(c.session.fds(), 0u);
        EXPECT_EQ(client_memory_stats().fds, before.fds + 5);

        // Another user is not held up by it.
        Client other(r, ports, Peer{200, 2000, 2000});
        ASSERT_EQ(other.open(), 0);
        ASSERT_EQ(other.channel(h), 0);
        EXPECT_EQ(r.fds_of_uid(2000), 2u);

        EXPECT_EQ(a.destroy_channel(ch0), 0);
        EXPECT_EQ(a.session.fds(), 2u);
        EXPECT_EQ(r.fds_of_uid(1000), 4u);
        EXPECT_EQ(b.channel(h), 0);
        EXPECT_EQ(b.session.fds(), 3u);
        EXPECT_EQ(c.open(), EMFILE);
    }
    EXPECT_EQ(client_memory_stats().fds, before.fds);
}

TEST_F(SessionTest, closing_a_session_releases_everything) {
    const ClientMemoryStats before = client_memory_stats();
    {
        Client c(resources, ports);
        ASSERT_EQ(c.open(), 0);
        const Handle pd = c.pd();
        ClientMemfd m(8 * shm::kPageSize);
        shm::RegMrReply mr{};
        ASSERT_EQ(c.reg_mr(pd, m, 8 * shm::kPageSize, IBV_ACCESS_LOCAL_WRITE, mr), 0);
        const Handle cq = c.cq();
        shm::CreateQpReply qp{};
        ASSERT_EQ(c.qp(pd, cq, qp), 0);
        EXPECT_EQ(resources.count(ObjKind::qp), 1u);
        EXPECT_EQ(resources.sessions().size(), 1u);
        EXPECT_GT(c.session.mapped_bytes(), 8 * shm::kPageSize);
        EXPECT_EQ(client_memory_stats().fds, before.fds + 1);
        EXPECT_EQ(c.session.fds(), 1u);
        EXPECT_EQ(resources.fds_of_uid(0), 1u);
        EXPECT_EQ(client_memory_stats().mappings, before.mappings + 4);
        EXPECT_EQ(c.session.info().counts[static_cast<std::size_t>(ObjKind::mr)], 1u);
    }
    for (std::size_t k = 0; k < shm::kObjKinds; ++k) EXPECT_EQ(resources.counts()[k], 0u);
    EXPECT_TRUE(resources.sessions().empty());
    EXPECT_EQ(resources.keys().live(), 0u);
    EXPECT_EQ(resources.qpns().live(), 0u);
    EXPECT_EQ(resources.fds_of_uid(0), 0u);
    const ClientMemoryStats after = client_memory_stats();
    EXPECT_EQ(after.fds, before.fds);
    EXPECT_EQ(after.mappings, before.mappings);
    EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
}

// A queue offers what its ring holds, and says so (IBA 11.2.4.1, 11.2.3.1: at least what was
// asked; rxe and real NICs report the rounded size): asking for 100 WRs gives a ring of 128,
// and a post past 128 is ENOMEM, so 128 is what the application is told and what a query says.
TEST_F(SessionTest, queues_report_what_their_rings_hold) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const Handle cq = c.cq();

    const shm::Layout l = shm::qp_layout(128, 64);
    ClientMemfd m(l.bytes);
    ASSERT_TRUE(shm::RingProducer<shm::SendWqe>::init(m.span(l.ring0, l.ring1 - l.ring0), 128));
    ASSERT_TRUE(shm::RingProducer<shm::RecvWqe>::init(m.span(l.ring1), 64));
    const shm::CreateQpReq req{pd, cq, cq, kNoHandle, IBV_QPT_RC, 0, {100, 50, 1, 1, 0}, 128, 64};
    FdList fds = fds_of({m.fd()});
    shm::CreateQpReply out{};
    ASSERT_EQ(c.session.create_qp(req, fds, out), 0);
    EXPECT_EQ(out.cap.max_send_wr, 128u);
    EXPECT_EQ(out.cap.max_recv_wr, 64u);
    const shm::QueryQpReply q = c.query(out.qp);
    EXPECT_EQ(q.attr.cap.max_send_wr, 128u);
    EXPECT_EQ(q.attr.cap.max_recv_wr, 64u);

    const shm::Layout sl = shm::srq_layout(128);
    ClientMemfd sm(sl.bytes);
    ASSERT_TRUE(shm::RingProducer<shm::RecvWqe>::init(sm.span(sl.ring0), 128));
    FdList sfds = fds_of({sm.fd()});
    shm::CreateSrqReply srq{};
    ASSERT_EQ(c.session.create_srq({pd, 100, 1, 0, 128, 0}, sfds, srq), 0);
    EXPECT_EQ(srq.max_wr, 128u);
    FdList none;
    shm::QuerySrqReply sq{};
    ASSERT_EQ(c.session.query_srq({srq.srq, 0}, none, sq), 0);
    EXPECT_EQ(sq.max_wr, 128u);

    // A CQ as rxe rounds it: its ring (a power of two above cqe) less one.
    const shm::Layout cl = shm::cq_layout(128);
    ClientMemfd cm(cl.bytes);
    ASSERT_TRUE(shm::RingConsumer<shm::Cqe>::init(cm.span(cl.ring0), 128));
    FdList cfds = fds_of({cm.fd()});
    shm::CreateCqReply cout{};
    ASSERT_EQ(c.session.create_cq({100, 128, kNoHandle, 0}, cfds, cout), 0);
    EXPECT_EQ(cout.cqe, 127u);
}

TEST_F(SessionTest, create_qp_checks_type_caps_and_rings) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const Handle cq = c.cq();
    shm::CreateQpReply out{};
    EXPECT_EQ(c.qp(pd, cq, out, IBV_QPT_RAW_PACKET), EOPNOTSUPP);  // a type with no engine
    EXPECT_EQ(c.qp(pd, cq, out, 5), EINVAL);                       // no type at all
    EXPECT_EQ(c.qp(pd, kNoHandle, out), EINVAL);
    EXPECT_EQ(c.qp(pd, cq, out, IBV_QPT_UD), 0);
    EXPECT_EQ(out.cap.max_send_wr, 16u);

    const shm::Layout l = shm::qp_layout(16, 16);
    ClientMemfd m(l.bytes);  // rings not formatted
    shm::CreateQpReq req{pd, cq, cq, kNoHandle, IBV_QPT_RC, 0, {16, 16, 1, 1, 0}, 16, 16};
    FdList fds = fds_of({m.fd()});
    EXPECT_EQ(c.session.create_qp(req, fds, out), EINVAL);
    req.cap.max_send_sge = 17;
    FdList fds2 = fds_of({m.fd()});
    EXPECT_EQ(c.session.create_qp(req, fds2, out), EINVAL);
    req.cap.max_send_sge = 1;
    req.sq_capacity = 8;  // below max_send_wr
    FdList fds3 = fds_of({m.fd()});
    EXPECT_EQ(c.session.create_qp(req, fds3, out), EINVAL);
    req.sq_capacity = 16;
    req.cap.max_send_wr = resources.limits().max_qp_wr + 1;
    FdList fds4 = fds_of({m.fd()});
    EXPECT_EQ(c.session.create_qp(req, fds4, out), EINVAL);
}

TEST_F(SessionTest, qp_steps_reset_init_rtr_rts_with_checked_values) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const Handle cq = c.cq();
    shm::CreateQpReply qp{};
    ASSERT_EQ(c.qp(pd, cq, qp), 0);
    const Qp* q = c.session.qp(qp.qp);
    auto shared_state = [&] {
        return std::atomic_ref<std::uint32_t>(q->control->state).load(std::memory_order_acquire);
    };

    shm::QpAttr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    const std::uint32_t to_init =
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    a.pkey_index = 1;
    EXPECT_EQ(c.modify(qp.qp, to_init, a), EINVAL);  // one pkey
    a.pkey_index = 0;
    a.qp_access_flags = 1u << 9;
    EXPECT_EQ(c.modify(qp.qp, to_init, a), EINVAL);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    EXPECT_EQ(c.modify(qp.qp, to_init, a), 0);
    EXPECT_EQ(shared_state(), std::uint32_t{IBV_QPS_INIT});

    shm::QpAttr r{};
    r.qp_state = IBV_QPS_RTR;
    r.path_mtu = IBV_MTU_1024;
    r.dest_qp_num = 0x123456;
    r.rq_psn = 0xabcdef;
    r.max_dest_rd_atomic = 4;
    r.min_rnr_timer = 12;
    r.ah_attr.is_global = 1;
    r.ah_attr.port_num = 1;
    const std::uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
    std::memcpy(r.ah_attr.dgid, dgid, 16);
    const std::uint32_t to_rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    auto bad = r;
    bad.path_mtu = IBV_MTU_4096 + 1;  // no ibv_mtu
    EXPECT_EQ(c.modify(qp.qp, to_rtr, bad), EINVAL);
    bad = r;
    bad.min_rnr_timer = 32;
    EXPECT_EQ(c.modify(qp.qp, to_rtr, bad), EINVAL);
    bad = r;
    bad.max_dest_rd_atomic = 129;
    EXPECT_EQ(c.modify(qp.qp, to_rtr, bad), EINVAL);
    bad = r;
    bad.dest_qp_num = 1u << 24;
    EXPECT_EQ(c.modify(qp.qp, to_rtr, bad), EINVAL);
    // (The IPv4-mapped destination GID is RoCEv2's rule: test_transport.cc.)
    bad = r;
    bad.ah_attr.sgid_index = 1;
    EXPECT_EQ(c.modify(qp.qp, to_rtr, bad), EINVAL);
    EXPECT_EQ(c.modify(qp.qp, to_rtr | IBV_QP_ALT_PATH, r), EINVAL);
    // Above the port's active 1024: clamped to it; a flow label masked to its 20 bits.
    r.path_mtu = IBV_MTU_4096;
    r.ah_attr.flow_label = 0xffffffff;
    EXPECT_EQ(c.modify(qp.qp, to_rtr, r), 0);

    shm::QpAttr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = 14;
    s.retry_cnt = 7;
    s.rnr_retry = 7;
    s.sq_psn = 0x1000000;
    s.max_rd_atomic = 16;
    const std::uint32_t to_rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    EXPECT_EQ(c.modify(qp.qp, to_rts, s), EINVAL);  // PSN wider than 24 bits
    s.sq_psn = 0xffffff;
    s.retry_cnt = 8;
    EXPECT_EQ(c.modify(qp.qp, to_rts, s), EINVAL);
    s.retry_cnt = 7;
    s.cur_qp_state = IBV_QPS_INIT;  // wrong current state
    EXPECT_EQ(c.modify(qp.qp, to_rts | IBV_QP_CUR_STATE, s), EINVAL);
    s.cur_qp_state = IBV_QPS_RTR;
    EXPECT_EQ(c.modify(qp.qp, to_rts | IBV_QP_CUR_STATE, s), 0);
    EXPECT_EQ(shared_state(), std::uint32_t{IBV_QPS_RTS});

    const shm::QueryQpReply got = c.query(qp.qp);
    EXPECT_EQ(got.attr.qp_state, std::uint32_t{IBV_QPS_RTS});
    EXPECT_EQ(got.attr.qp_access_flags, std::uint32_t{IBV_ACCESS_REMOTE_WRITE});
    EXPECT_EQ(got.attr.port_num, 1u);
    EXPECT_EQ(got.attr.dest_qp_num, 0x123456u);
    EXPECT_EQ(got.attr.rq_psn, 0xabcdefu);
    EXPECT_EQ(got.attr.sq_psn, 0xffffffu);
    EXPECT_EQ(got.attr.path_mtu, std::uint32_t{IBV_MTU_1024});
    EXPECT_EQ(got.attr.max_rd_atomic, 16u);
    EXPECT_EQ(got.attr.ah_attr.dgid[15], 2u);
    EXPECT_EQ(got.attr.ah_attr.flow_label, 0xfffffu);
    EXPECT_EQ(got.attr.cap.max_send_wr, 16u);
    EXPECT_EQ(got.qp_type, std::uint32_t{IBV_QPT_RC});
    EXPECT_EQ(got.pd, pd);
    EXPECT_EQ(got.send_cq, cq);
    EXPECT_EQ(got.srq, kNoHandle);

    // RTS -> INIT is no transition; ERR from anywhere; RESET forgets the attributes.
    EXPECT_EQ(c.modify(qp.qp, to_init, a), EINVAL);
    shm::QpAttr e{};
    e.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(c.modify(qp.qp, IBV_QP_STATE, e), 0);
    EXPECT_EQ(shared_state(), std::uint32_t{IBV_QPS_ERR});
    e.qp_state = IBV_QPS_RESET;
    EXPECT_EQ(c.modify(qp.qp, IBV_QP_STATE, e), 0);
    const shm::QueryQpReply reset = c.query(qp.qp);
    EXPECT_EQ(reset.attr.qp_state, std::uint32_t{IBV_QPS_RESET});
    EXPECT_EQ(reset.attr.dest_qp_num, 0u);
    EXPECT_EQ(reset.attr.sq_psn, 0u);
    EXPECT_EQ(reset.attr.cap.max_send_wr, 16u);
    EXPECT_EQ(shared_state(), std::uint32_t{IBV_QPS_RESET});
    e.qp_state = 7;  // IBV_QPS_UNKNOWN
    EXPECT_EQ(c.modify(qp.qp, IBV_QP_STATE, e), EINVAL);
}

TEST_F(SessionTest, cq_in_use_by_a_qp_is_busy) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const Handle cq = c.cq();
    shm::CreateQpReply qp{};
    ASSERT_EQ(c.qp(pd, cq, qp), 0);
    FdList none;
    EXPECT_EQ(c.session.destroy_cq({cq, 0}, none, c.none), EBUSY);
    EXPECT_EQ(c.session.cq(cq)->refs, 2u);  // send and receive
    EXPECT_EQ(c.destroy_pd(pd), EBUSY);
    EXPECT_EQ(c.session.destroy_qp({qp.qp, 0}, none, c.none), 0);
    EXPECT_EQ(c.session.destroy_cq({cq, 0}, none, c.none), 0);
    EXPECT_EQ(c.destroy_pd(pd), 0);
}

TEST_F(SessionTest, create_cq_checks_depth_and_capacity) {
    Client c(resources, ports);
    ASSERT_EQ(c.open(), 0);
    const shm::Layout l = shm::cq_layout(16);
    ClientMemfd m(l.bytes);
    ASSERT_TRUE(shm::RingConsumer<shm::Cqe>::init(m.span(l.ring0), 16));
    shm::CreateCqReply out{};
    for (shm::CreateCqReq req :
         {shm::CreateCqReq{16, 16, kNoHandle, 0},  // capacity not above cqe
          shm::CreateCqReq{0, 16, kNoHandle, 0}, shm::CreateCqReq{4194304, 8388608, kNoHandle, 0},
          shm::CreateCqReq{15, 24, kNoHandle, 0},
          shm::CreateCqReq{15, 16, 0x10000, 0},     // no such channel
          shm::CreateCqReq{7, 8, kNoHandle, 0}}) {  // ring of 16, not 8
        FdList fds = fds_of({m.fd()});
        EXPECT_EQ(c.session.create_cq(req, fds, out), EINVAL) << req.cqe << " " << req.capacity;
    }
    FdList fds = fds_of({m.fd()});
    EXPECT_EQ(c.session.create_cq({15, 16, kNoHandle, 0}, fds, out), 0);
    EXPECT_EQ(out.cqe, 15u);
}

}  // namespace
}  // namespace snic::daemon

namespace snic::daemon::fixture {
namespace {

// A client registering sparse 1 TiB regions over and over cannot fill snicd's address space
// (128 TiB on x86-64): it stops at its quota, its user at the user's, with ENOMEM.
TEST_F(SessionTest, registrations_stop_at_the_address_space_quotas) {
    constexpr std::uint64_t kTiB = std::uint64_t{1} << 40;
    const Limits& l = resources.limits();
    ClientMemfd m(kTiB);  // sparse: nothing is touched
    auto fill = [&](Client& c) {
        const Handle pd = c.pd();
        shm::RegMrReply out{};
        std::uint64_t made = 0;
        int err = 0;
        while ((err = c.reg_mr(pd, m, kTiB, IBV_ACCESS_LOCAL_WRITE, out)) == 0) ++made;
        EXPECT_EQ(err, ENOMEM);
        return made;
    };
    // Each client's rings take a little of its quota: a whole TiB less fits.
    Client a(resources, ports, Peer{100, 1000, 1000});
    ASSERT_EQ(a.open(), 0);
    EXPECT_EQ(fill(a), l.max_mapped_per_client / kTiB - 1);
    Client b(resources, ports, Peer{101, 1000, 1000});
    ASSERT_EQ(b.open(), 0);
    EXPECT_EQ(fill(b), l.max_mapped_per_client / kTiB - 1);
    // The user's quota is nearly spent by the two: a third client of it gets the rest.
    Client c(resources, ports, Peer{102, 1000, 1000});
    ASSERT_EQ(c.open(), 0);
    EXPECT_EQ(fill(c), l.max_mapped_per_uid / kTiB - 2 * (l.max_mapped_per_client / kTiB - 1) - 1);
    // Another user is not held up by it.
    Client other(resources, ports, Peer{200, 2000, 2000});
    ASSERT_EQ(other.open(), 0);
    shm::RegMrReply out{};
    EXPECT_EQ(other.reg_mr(other.pd(), m, kTiB, IBV_ACCESS_LOCAL_WRITE, out), 0);
}

// The review's case: one client's small regions (3,071 MRs of 16 one-page segments) took the
// daemon's 49,152 mmaps and every other user, root included, got ENOMEM; rings were not
// counted at all. Now a user other than root stops at its share of the mmaps (rings
// included), users together leave root its reserve, and root reaches the daemon's limit.
TEST_F(SessionTest, a_user_holds_its_share_of_the_mappings_and_root_keeps_its_reserve) {
    Limits small = kLimits;
    small.max_mappings_per_daemon = 64;
    small.max_mappings_per_uid = 32;
    small.root_reserved_mappings = 8;
    Resources r(small);
    constexpr std::uint64_t kPage = 4096;
    ClientMemfd m(kPage);
    auto fill = [&](Client& c) {
        const Handle pd = c.pd();
        shm::RegMrReply out{};
        int err = 0;
        while ((err = c.reg_mr(pd, m, kPage, IBV_ACCESS_LOCAL_WRITE, out)) == 0) {
        }
        EXPECT_EQ(err, ENOMEM);
        return c.session.mappings();
    };
    Client a(r, ports, Peer{100, 1000, 1000});
    ASSERT_EQ(a.open(), 0);
    EXPECT_EQ(fill(a), 32u) << "its share, its context ring counted";
    Client b(r, ports, Peer{200, 2000, 2000});
    ASSERT_EQ(b.open(), 0);
    EXPECT_EQ(fill(b), 64u - 8u - 32u) << "the rest but root's reserve";
    Client root(r, ports, Peer{300, 0, 0});
    ASSERT_EQ(root.open(), 0);
    EXPECT_EQ(fill(root), 8u) << "root's reserve";
    // A ring is an mmap too: a CQ of a user without room is refused.
    const shm::Layout l = shm::cq_layout(16);
    ClientMemfd cq(l.bytes);
    ASSERT_TRUE(shm::RingConsumer<shm::Cqe>::init(cq.span(l.ring0), 16));
    FdList fds = fds_of({cq.fd()});
    shm::CreateCqReply out{};
    EXPECT_EQ(a.session.create_cq({15, 16, kNoHandle, 0}, fds, out), ENOMEM);
}

}  // namespace
}  // namespace snic::daemon::fixture
