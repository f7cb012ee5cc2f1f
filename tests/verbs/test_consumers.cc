// snic-consumer-tests: what UCX, Open MPI and libfabric rely on in libsnic beyond the verbs
// calls themselves, against a running snicd with two ports (tests/integration/test_verbs.py
// starts it and passes SNIC_TEST_PORT0_IP, SNIC_TEST_PORT1_IP and SNIC_TEST_DEVICE_PREFIX):
// getifaddrs() listing the ports as interfaces, rdma_getaddrinfo() from hints alone, loopback
// binds and destinations, rdma_cm ids carrying the device's PD, SNIC_DEVICES, and errno
// set by every failing verb to the error it returns.
// Linked with libsnic only.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <snic/snic_ext.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tests/verbs/common.h"

using snic::verbs_test::init_attr;
using snic::verbs_test::kInitMask;
using snic::verbs_test::open_device;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
}

std::string port_ip(int i) {
    return env(i == 0 ? "SNIC_TEST_PORT0_IP" : "SNIC_TEST_PORT1_IP");
}

std::string device(int i) {
    return env("SNIC_TEST_DEVICE_PREFIX") + "_" + std::to_string(i);
}

// The port's iWARP device.
std::string iw_device(int i) {
    return env("SNIC_TEST_DEVICE_PREFIX") + "_iw" + std::to_string(i);
}

sockaddr_in sin_of(const std::string& ip, std::uint16_t port = 0) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET, ip.c_str(), &s.sin_addr), 1) << ip;
    return s;
}

std::string ip_of(const sockaddr* sa) {
    char buf[INET_ADDRSTRLEN] = {};
    if (sa == nullptr || sa->sa_family != AF_INET) return "";
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
    return buf;
}

struct Iface {
    std::string addr, netmask, broadcast;
    unsigned flags = 0;
    int count = 0;
};

std::map<std::string, Iface> interfaces() {
    std::map<std::string, Iface> out;
    ifaddrs* list = nullptr;
    EXPECT_EQ(getifaddrs(&list), 0);
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        Iface& f = out[i->ifa_name];
        ++f.count;
        f.flags = i->ifa_flags;
        if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET) {
            f.addr = ip_of(i->ifa_addr);
            f.netmask = ip_of(i->ifa_netmask);
            f.broadcast = ip_of(i->ifa_broadaddr);
        }
    }
    freeifaddrs(list);
    return out;
}

// A QP of `type` with room for four WRs of one SGE each way, on `cq`.
ibv_qp_init_attr small_qp(ibv_cq* cq, ibv_qp_type type) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = type;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return a;
}

class Consumers : public ::testing::Test {
  protected:
    void SetUp() override {
        if (port_ip(0).empty() || port_ip(1).empty() || env("SNIC_TEST_DEVICE_PREFIX").empty())
            GTEST_SKIP() << "run by tests/integration/test_verbs.py (no SNIC_TEST_* set)";
        unsetenv("SNIC_DEVICES");
        unsetenv("SNIC_IFADDRS");
    }
    void TearDown() override {
        unsetenv("SNIC_DEVICES");
        unsetenv("SNIC_IFADDRS");
    }
};

TEST_F(Consumers, getifaddrs_lists_each_port_as_an_interface_after_the_kernels) {
    const auto ifs = interfaces();
    ASSERT_TRUE(ifs.count("lo")) << "the kernel's interfaces come first and stay";
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(ifs.count(device(i))) << device(i);
        const Iface& f = ifs.at(device(i));
        EXPECT_EQ(f.count, 1);
        EXPECT_EQ(f.addr, port_ip(i));
        EXPECT_EQ(f.netmask, "255.255.255.0");
        EXPECT_EQ(f.broadcast, port_ip(i).substr(0, port_ip(i).rfind('.')) + ".255");
        EXPECT_EQ(f.flags & (IFF_UP | IFF_RUNNING), unsigned{IFF_UP | IFF_RUNNING});
        EXPECT_EQ(f.flags & IFF_LOOPBACK, 0u);
    }
}

TEST_F(Consumers, getifaddrs_leaves_the_ports_out_with_snic_ifaddrs_0) {
    setenv("SNIC_IFADDRS", "0", 1);
    const auto ifs = interfaces();
    EXPECT_TRUE(ifs.count("lo"));
    EXPECT_FALSE(ifs.count(device(0)));
    EXPECT_FALSE(ifs.count(device(1)));
}

TEST_F(Consumers, freeifaddrs_takes_lists_many_times_over) {
    // Each call's block is released by its own freeifaddrs, in any order.
    ifaddrs* a = nullptr;
    ifaddrs* b = nullptr;
    ASSERT_EQ(getifaddrs(&a), 0);
    ASSERT_EQ(getifaddrs(&b), 0);
    freeifaddrs(a);
    int n = 0;
    for (ifaddrs* i = b; i != nullptr; i = i->ifa_next) n += device(0) == i->ifa_name;
    EXPECT_EQ(n, 1);
    freeifaddrs(b);
    freeifaddrs(nullptr);
}

TEST_F(Consumers, snic_devices_limits_what_the_process_sees) {
    setenv("SNIC_DEVICES", device(1).c_str(), 1);
    int n = -1;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(std::string(ibv_get_device_name(list[0])), device(1));
    ibv_free_device_list(list);
    const auto ifs = interfaces();
    EXPECT_FALSE(ifs.count(device(0)));
    EXPECT_TRUE(ifs.count(device(1)));
    // With only port 1 visible, port 0's address is reached from port 1 (its subnet), not
    // resolved to port 0 itself.
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in dst = sin_of(port_ip(0), 7471);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
    ASSERT_NE(id->verbs, nullptr);
    EXPECT_EQ(std::string(ibv_get_device_name(id->verbs->device)), device(1));
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), port_ip(1));
    EXPECT_EQ(rdma_destroy_id(id), 0);
}

TEST_F(Consumers, getaddrinfo_from_hints_alone) {
    // libfabric passes no node and no service, only the addresses it already has.
    sockaddr_in src = sin_of(port_ip(1));
    sockaddr_in dst = sin_of(port_ip(0), 4791);
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
    hints.ai_src_len = sizeof src;
    hints.ai_dst_addr = reinterpret_cast<sockaddr*>(&dst);
    hints.ai_dst_len = sizeof dst;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0);
    ASSERT_NE(res, nullptr);
    EXPECT_EQ(ip_of(res->ai_src_addr), port_ip(1));
    EXPECT_EQ(ip_of(res->ai_dst_addr), port_ip(0));
    EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(res->ai_dst_addr)->sin_port), 4791);
    EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
    rdma_freeaddrinfo(res);
    // A node names the destination; the hints' source is kept.
    hints.ai_dst_addr = nullptr;
    hints.ai_dst_len = 0;
    ASSERT_EQ(rdma_getaddrinfo(port_ip(0).c_str(), "7000", &hints, &res), 0);
    EXPECT_EQ(ip_of(res->ai_src_addr), port_ip(1));
    EXPECT_EQ(ip_of(res->ai_dst_addr), port_ip(0));
    rdma_freeaddrinfo(res);
    // Nothing at all is still an error.
    rdma_addrinfo empty{};
    errno = 0;
    EXPECT_NE(rdma_getaddrinfo(nullptr, nullptr, &empty, &res), 0);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Consumers, loopback_bind_takes_no_device_and_listens_everywhere) {
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in lo = sin_of("127.0.0.1");
    ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&lo)), 0) << std::strerror(errno);
    EXPECT_EQ(id->verbs, nullptr);
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), "127.0.0.1");
    EXPECT_EQ(rdma_listen(id, 4), 0) << std::strerror(errno);
    EXPECT_NE(rdma_get_src_port(id), 0);
    EXPECT_EQ(rdma_destroy_id(id), 0);
}

TEST_F(Consumers, a_wildcard_bind_to_port_0_takes_a_port_at_once) {
    // As Linux's: qperf's server sends its client the port rdma_get_src_port gives after the
    // bind, before it listens.
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in any = sin_of("0.0.0.0");
    ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&any)), 0) << std::strerror(errno);
    const std::uint16_t port = ntohs(rdma_get_src_port(id));
    EXPECT_NE(port, 0);
    EXPECT_EQ(id->verbs, nullptr);
    // The port is the id's: another id cannot bind it, on the wildcard or on a port's address.
    rdma_cm_id* other = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &other, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in same = sin_of("0.0.0.0", port);
    EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&same)), -1);
    EXPECT_EQ(errno, EADDRINUSE);
    sockaddr_in same_on_port0 = sin_of(port_ip(0), port);
    EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&same_on_port0)), -1);
    EXPECT_EQ(errno, EADDRINUSE);
    // The listen keeps it.
    EXPECT_EQ(rdma_listen(id, 4), 0) << std::strerror(errno);
    EXPECT_EQ(ntohs(rdma_get_src_port(id)), port);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    EXPECT_EQ(rdma_destroy_id(other), 0);

    // An id bound to the wildcard and then resolved keeps its port, on the device it resolves
    // to.
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&any)), 0) << std::strerror(errno);
    const std::uint16_t active_port = ntohs(rdma_get_src_port(id));
    EXPECT_NE(active_port, 0);
    sockaddr_in dst = sin_of(port_ip(0), 7474);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0)
        << std::strerror(errno);
    ASSERT_NE(id->verbs, nullptr);
    EXPECT_EQ(ntohs(rdma_get_src_port(id)), active_port);
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), port_ip(0));
    EXPECT_EQ(rdma_destroy_id(id), 0);
}

TEST_F(Consumers, a_call_on_a_destroyed_id_fails_without_touching_it) {
    // perftest retries rdma_resolve_addr with the id it destroyed. Nothing of rdma_cm is
    // created between a destroy and the calls, so the freed memory cannot hold a new id.
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_destroy_id(id), 0);
    sockaddr_in dst = sin_of(port_ip(0), 7475);
    sockaddr_in src = sin_of(port_ip(1));
    errno = 0;
    EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&src)), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_resolve_route(id, 1000), -1);
    EXPECT_EQ(rdma_listen(id, 1), -1);
    EXPECT_EQ(rdma_connect(id, nullptr), -1);
    EXPECT_EQ(rdma_accept(id, nullptr), -1);
    EXPECT_EQ(rdma_disconnect(id), -1);
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &src, 1), -1);
    EXPECT_EQ(rdma_get_src_port(id), 0);
    rdma_destroy_qp(id);  // nothing to report: it returns
    errno = 0;
    EXPECT_EQ(rdma_destroy_id(id), -1);
    EXPECT_EQ(errno, EINVAL);

    // The same for a destroyed channel (perftest then destroys its channel a second time).
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    rdma_destroy_event_channel(ch);
    rdma_cm_event* e = nullptr;
    errno = 0;
    EXPECT_EQ(rdma_get_cm_event(ch, &e), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), -1);
    EXPECT_EQ(errno, EINVAL);
    rdma_destroy_event_channel(ch);  // nothing to report: it returns
}

TEST_F(Consumers, a_synchronous_call_leaves_its_event_in_the_id) {
    // As librdmacm's: the event stays in id->event until the id's next call (rsockets read
    // the connect response's private data there).
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in dst = sin_of(port_ip(0), 7476);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
    ASSERT_NE(id->event, nullptr);
    EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(id->event->id, id);
    ASSERT_EQ(rdma_resolve_route(id, 1000), 0);
    ASSERT_NE(id->event, nullptr);
    EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
    EXPECT_EQ(rdma_destroy_id(id), 0);  // and the event goes with the id
}

TEST_F(Consumers, a_synchronous_id_migrated_to_a_channel_leaves_its_event_behind) {
    // libfabric's verbs provider: resolved synchronously, then moved to its own channel and
    // later destroyed. The event the synchronous call left is acknowledged at the move, as
    // librdmacm does; rdma_destroy_id used to wait for it forever. An alarm ends a hang.
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in dst = sin_of(port_ip(0), 7477);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
    ASSERT_NE(id->event, nullptr);
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    ASSERT_EQ(rdma_migrate_id(id, ch), 0);
    EXPECT_EQ(id->event, nullptr);
    alarm(30);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    alarm(0);
    rdma_destroy_event_channel(ch);
}

TEST_F(Consumers, loopback_destination_resolves_to_the_first_port) {
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in dst = sin_of("127.0.0.1", 7472);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
    ASSERT_NE(id->verbs, nullptr);
    EXPECT_EQ(std::string(ibv_get_device_name(id->verbs->device)), device(0));
    EXPECT_EQ(ip_of(rdma_get_peer_addr(id)), port_ip(0));
    EXPECT_EQ(rdma_destroy_id(id), 0);
}

TEST_F(Consumers, an_id_on_a_device_carries_its_pd_for_qps) {
    // UCX's rdmacm transport creates a QP on id->pd right after address resolution.
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in src = sin_of(port_ip(1));
    sockaddr_in dst = sin_of(port_ip(0), 7473);
    ASSERT_EQ(rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src),
                                reinterpret_cast<sockaddr*>(&dst), 1000),
              0);
    ASSERT_NE(id->pd, nullptr);
    EXPECT_EQ(id->pd->context, id->verbs);
    ibv_cq* cq = ibv_create_cq(id->verbs, 4, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_UD;
    a.cap.max_send_wr = a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(id->pd, &a);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    // Every id on the device shares the one PD, as librdmacm's do.
    rdma_cm_id* other = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &other, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in bind1 = sin_of(port_ip(1));
    ASSERT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&bind1)), 0);
    EXPECT_EQ(other->pd, id->pd);
    EXPECT_EQ(rdma_destroy_id(other), 0);
    EXPECT_EQ(rdma_destroy_id(id), 0);
}

}  // namespace

namespace {

// rdma-core's callers read a failing verb's error from its return value or from errno; both
// say the same.
TEST_F(Consumers, failing_verbs_set_errno_to_what_they_return) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_GE(n, 1);
    ibv_context* ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(pd, nullptr);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr a = small_qp(cq, IBV_QPT_RC);
    ibv_qp* qp = ibv_create_qp(pd, &a);
    ASSERT_NE(qp, nullptr);

    // RESET -> RTS is no transition.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    errno = 0;
    int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
    EXPECT_NE(rc, 0);
    EXPECT_EQ(errno, rc);
    // A receive posted to a QP in RESET.
    ibv_recv_wr rwr{};
    ibv_recv_wr* bad_r = nullptr;
    errno = 0;
    rc = ibv_post_recv(qp, &rwr, &bad_r);
    EXPECT_EQ(rc, EINVAL);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(bad_r, &rwr);
    // A send with an opcode out of range.
    ibv_send_wr swr{};
    swr.opcode = static_cast<ibv_wr_opcode>(200);
    ibv_send_wr* bad_s = nullptr;
    errno = 0;
    rc = ibv_post_send(qp, &swr, &bad_s);
    EXPECT_NE(rc, 0);
    EXPECT_EQ(errno, rc);
    // What snic does not do: a multicast group, ECE, resizing a CQ.
    ibv_gid mgid{};
    errno = 0;
    EXPECT_EQ(ibv_attach_mcast(qp, &mgid, 0), EOPNOTSUPP);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_resize_cq(cq, 16), EOPNOTSUPP);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_ece ece{};
    errno = 0;
    EXPECT_EQ(ibv_query_ece(qp, &ece), EOPNOTSUPP);
    EXPECT_EQ(errno, EOPNOTSUPP);
    // snic's own extension: a port that does not exist.
    in_addr ip{};
    errno = 0;
    EXPECT_EQ(snic_query_port_ipv4(ctx, 2, &ip), EINVAL);
    EXPECT_EQ(errno, EINVAL);
    // Objects still in use.
    errno = 0;
    rc = ibv_dealloc_pd(pd);
    EXPECT_EQ(rc, EBUSY);
    EXPECT_EQ(errno, EBUSY);
    errno = 0;
    rc = ibv_destroy_cq(cq);
    EXPECT_EQ(rc, EBUSY);
    EXPECT_EQ(errno, EBUSY);

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace

// --- iWARP devices -------------------------------------------------------------------------

TEST_F(Consumers, each_port_is_an_iwarp_rnic_too) {
    for (int i = 0; i < 2; ++i) {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        ASSERT_NE(list, nullptr);
        ibv_device* dev = nullptr;
        for (int k = 0; k < n; ++k)
            if (iw_device(i) == ibv_get_device_name(list[k])) dev = list[k];
        ASSERT_NE(dev, nullptr) << iw_device(i);
        EXPECT_EQ(dev->transport_type, IBV_TRANSPORT_IWARP);
        EXPECT_EQ(dev->node_type, IBV_NODE_RNIC);
        ibv_free_device_list(list);
    }
    // One interface per port: the iWARP device shares its port's.
    const auto ifs = interfaces();
    EXPECT_FALSE(ifs.count(iw_device(0)));
    setenv("SNIC_DEVICES", iw_device(0).c_str(), 1);
    EXPECT_TRUE(interfaces().count(iw_device(0))) << "the port's only visible device names it";
}

TEST_F(Consumers, an_iwarp_qp_is_connected_by_rdma_cm_not_by_modify_qp) {
    ibv_context* ctx = open_device(iw_device(0));
    ASSERT_NE(ctx, nullptr);
    // Its GID is the port's MAC (as Linux's soft-iWARP reports it), its RoCE twin's the
    // IPv4-mapped address.
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
    ibv_context* roce = open_device(device(0));
    ASSERT_NE(roce, nullptr);
    ibv_device_attr da{};
    ASSERT_EQ(ibv_query_device(roce, &da), 0);
    const auto* guid = reinterpret_cast<const std::uint8_t*>(&da.node_guid);
    // The node GUID is the MAC's EUI-64: MAC = guid[0]^2, guid[1], guid[2], guid[5..7].
    const std::uint8_t mac[6] = {
        static_cast<std::uint8_t>(guid[0] ^ 2), guid[1], guid[2], guid[5], guid[6], guid[7]};
    EXPECT_EQ(std::memcmp(gid.raw, mac, 6), 0);
    for (int k = 6; k < 16; ++k) EXPECT_EQ(gid.raw[k], 0) << k;
    EXPECT_EQ(ibv_close_device(roce), 0);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(pd, nullptr);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr a = small_qp(cq, IBV_QPT_UD);
    errno = 0;
    EXPECT_EQ(ibv_create_qp(pd, &a), nullptr) << "iWARP is connected: RC only";
    EXPECT_EQ(errno, EOPNOTSUPP);
    a.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd, &a);
    ASSERT_NE(qp, nullptr);

    ibv_qp_attr attr = init_attr(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_EQ(ibv_modify_qp(qp, &attr, kInitMask), 0);
    // What would take a RoCE QP to RTR does not take an iWARP one: no connection names it.
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = 0x11;
    attr.rq_psn = 1;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.port_num = 1;
    EXPECT_EQ(ibv_modify_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              EINVAL);
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
    // Nor does snic's own binding bit from outside rdma_cm.
    EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | (1 << 31)), EINVAL);

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Linux's iWARP drivers (siw's IDLE, cxgb4's and irdma's alike) report a QP waiting for its
// connection as INIT, from its creation on; so does snic. An iWARP device has no address
// handles (max_ah 0, EOPNOTSUPP), as siw: iWARP has no UD. The port's RoCE device keeps both.
TEST_F(Consumers, a_new_iwarp_qp_reports_init_and_an_iwarp_device_has_no_address_handles) {
    for (const bool iwarp : {true, false}) {
        SCOPED_TRACE(iwarp ? "iWARP" : "RoCE");
        ibv_context* ctx = open_device(iwarp ? iw_device(0) : device(0));
        ASSERT_NE(ctx, nullptr);
        ibv_pd* pd = ibv_alloc_pd(ctx);
        ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
        ASSERT_NE(pd, nullptr);
        ASSERT_NE(cq, nullptr);
        ibv_qp_init_attr a = small_qp(cq, IBV_QPT_RC);
        ibv_qp* qp = ibv_create_qp(pd, &a);
        ASSERT_NE(qp, nullptr);
        EXPECT_EQ(qp->state, IBV_QPS_RESET);  // as libibverbs sets it at creation
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
        EXPECT_EQ(attr.qp_state, iwarp ? IBV_QPS_INIT : IBV_QPS_RESET);

        ibv_device_attr da{};
        ASSERT_EQ(ibv_query_device(ctx, &da), 0);
        EXPECT_EQ(da.max_ah, iwarp ? 0 : 65536);
        ibv_ah_attr ah{};
        ah.is_global = 1;
        ah.port_num = 1;
        ah.grh.hop_limit = 64;
        ah.grh.dgid.raw[10] = ah.grh.dgid.raw[11] = 0xff;
        const sockaddr_in peer = sin_of(port_ip(1));
        std::memcpy(&ah.grh.dgid.raw[12], &peer.sin_addr, 4);
        errno = 0;
        ibv_ah* made = ibv_create_ah(pd, &ah);
        if (iwarp) {
            EXPECT_EQ(made, nullptr);
            EXPECT_EQ(errno, EOPNOTSUPP);
        } else {
            ASSERT_NE(made, nullptr) << std::strerror(errno);
            EXPECT_EQ(ibv_destroy_ah(made), 0);
        }
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
        EXPECT_EQ(ibv_destroy_cq(cq), 0);
        EXPECT_EQ(ibv_dealloc_pd(pd), 0);
        EXPECT_EQ(ibv_close_device(ctx), 0);
    }
}

namespace {

// The next event on `ch` within 10 s, which must be `want`; nullptr (and a failure) otherwise.
rdma_cm_event* next_event(rdma_event_channel* ch, rdma_cm_event_type want) {
    pollfd p{ch->fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) {
        ADD_FAILURE() << "no " << rdma_event_str(want) << " within 10 s";
        return nullptr;
    }
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch, &e) != 0) {
        ADD_FAILURE() << "rdma_get_cm_event: " << std::strerror(errno);
        return nullptr;
    }
    if (e->event != want) {
        ADD_FAILURE() << rdma_event_str(e->event) << " (status " << e->status << ") where "
                      << rdma_event_str(want) << " was due";
        rdma_ack_cm_event(e);
        return nullptr;
    }
    return e;
}

}  // namespace

// An application's own QP on iWARP, moved with the attributes rdma_init_qp_attr gives, as
// Linux's iw_cm gives them: INIT and RTR alike are INIT's (remote read and write, the port),
// RTS is no attribute. The QP waits in INIT, and rdma_accept binds it to its connection (the
// passive side of rdma-core's own external-QP test; on RoCE RTR needs the peer's REQ). A QP
// left as it was created (reported in INIT, held in RESET) is bound the same way.
class IwarpAppQp : public Consumers {
  protected:
    void SetUp() override {
        Consumers::SetUp();
        if (IsSkipped()) return;
        setenv("SNIC_DEVICES", (iw_device(0) + "," + iw_device(1)).c_str(), 1);
        pch = rdma_create_event_channel();
        ach = rdma_create_event_channel();
        ASSERT_NE(pch, nullptr);
        ASSERT_NE(ach, nullptr);
        ASSERT_EQ(rdma_create_id(pch, &listen, nullptr, RDMA_PS_TCP), 0);
        at = sin_of(port_ip(0));
        ASSERT_EQ(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&at)), 0)
            << std::strerror(errno);
        ASSERT_EQ(rdma_listen(listen, 1), 0);
        at.sin_port = rdma_get_src_port(listen);
    }
    void TearDown() override {
        if (listen != nullptr) {
            EXPECT_EQ(rdma_destroy_id(listen), 0);
        }
        if (ach != nullptr) rdma_destroy_event_channel(ach);
        if (pch != nullptr) rdma_destroy_event_channel(pch);
        Consumers::TearDown();
    }

    // Connects an rdma_cm QP on port 1's device to an application's QP on port 0's, which
    // `prepare` may move before rdma_accept binds it; then a SEND crosses.
    void connect_to_app_qp(const std::function<void(rdma_cm_id* child, ibv_qp* qp)>& prepare) {
        rdma_cm_id* act = nullptr;
        ASSERT_EQ(rdma_create_id(ach, &act, nullptr, RDMA_PS_TCP), 0);
        sockaddr_in src = sin_of(port_ip(1));
        ASSERT_EQ(rdma_resolve_addr(act, reinterpret_cast<sockaddr*>(&src),
                                    reinterpret_cast<sockaddr*>(&at), 2000),
                  0);
        rdma_cm_event* e = next_event(ach, RDMA_CM_EVENT_ADDR_RESOLVED);
        ASSERT_NE(e, nullptr);
        rdma_ack_cm_event(e);
        ASSERT_EQ(std::string(ibv_get_device_name(act->verbs->device)), iw_device(1));
        ASSERT_EQ(rdma_resolve_route(act, 2000), 0);
        e = next_event(ach, RDMA_CM_EVENT_ROUTE_RESOLVED);
        ASSERT_NE(e, nullptr);
        rdma_ack_cm_event(e);
        ibv_qp_init_attr qa{};
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
        qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
        ASSERT_EQ(rdma_create_qp(act, nullptr, &qa), 0) << std::strerror(errno);
        rdma_conn_param cp{};
        cp.responder_resources = cp.initiator_depth = 1;
        cp.retry_count = 7;
        ASSERT_EQ(rdma_connect(act, &cp), 0) << std::strerror(errno);

        e = next_event(pch, RDMA_CM_EVENT_CONNECT_REQUEST);
        ASSERT_NE(e, nullptr);
        rdma_cm_id* child = e->id;
        rdma_ack_cm_event(e);
        ibv_pd* pd = ibv_alloc_pd(child->verbs);
        ibv_cq* cq = ibv_create_cq(child->verbs, 8, nullptr, nullptr, 0);
        ASSERT_NE(pd, nullptr);
        ASSERT_NE(cq, nullptr);
        ibv_qp_init_attr own = small_qp(cq, IBV_QPT_RC);
        ibv_qp* qp = ibv_create_qp(pd, &own);
        ASSERT_NE(qp, nullptr);
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
        EXPECT_EQ(attr.qp_state, IBV_QPS_INIT) << "a new iWARP QP, as Linux reports it";
        ASSERT_NO_FATAL_FAILURE(prepare(child, qp));

        std::vector<char> rbuf(64);  // heap memory: libsnic shares no stack
        ibv_mr* rmr = ibv_reg_mr(pd, rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(rmr, nullptr);
        ibv_sge rsge{reinterpret_cast<std::uintptr_t>(rbuf.data()), 64, rmr->lkey};
        ibv_recv_wr rwr{};
        rwr.wr_id = 7;
        rwr.sg_list = &rsge;
        rwr.num_sge = 1;
        ibv_recv_wr* bad_r = nullptr;
        // Receives go in from INIT on; a QP still in RESET takes its receive once bound.
        const bool early = qp->state == IBV_QPS_INIT;
        if (early) {
            ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad_r), 0);
        }
        cp = {};
        cp.responder_resources = cp.initiator_depth = 1;
        cp.qp_num = qp->qp_num;
        ASSERT_EQ(rdma_accept(child, &cp), 0) << std::strerror(errno);
        e = next_event(ach, RDMA_CM_EVENT_ESTABLISHED);
        ASSERT_NE(e, nullptr);
        rdma_ack_cm_event(e);
        e = next_event(pch, RDMA_CM_EVENT_ESTABLISHED);
        ASSERT_NE(e, nullptr);
        rdma_ack_cm_event(e);
        ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
        EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
        if (!early) {
            ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad_r), 0);
        }

        // A SEND from the active side lands in the application's QP.
        const std::string text = "over iWARP";
        std::vector<char> sbuf(text.begin(), text.end());
        ibv_mr* smr = ibv_reg_mr(act->pd, sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(smr, nullptr);
        ibv_sge ssge{reinterpret_cast<std::uintptr_t>(sbuf.data()),
                     static_cast<std::uint32_t>(sbuf.size()), smr->lkey};
        ibv_send_wr swr{};
        swr.wr_id = 9;
        swr.sg_list = &ssge;
        swr.num_sge = 1;
        swr.opcode = IBV_WR_SEND;
        swr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad_s = nullptr;
        ASSERT_EQ(ibv_post_send(act->qp, &swr, &bad_s), 0);
        const auto poll_one = [](ibv_cq* on, ibv_wc* wc) {
            for (int spins = 0; spins < 10000000; ++spins) {
                const int n = ibv_poll_cq(on, 1, wc);
                if (n != 0) return n;
            }
            return 0;
        };
        ibv_wc wc{};
        ASSERT_EQ(poll_one(act->send_cq, &wc), 1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        ASSERT_EQ(poll_one(cq, &wc), 1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, 7u);
        EXPECT_EQ(wc.byte_len, text.size());
        EXPECT_EQ(std::string(rbuf.data(), text.size()), text);

        EXPECT_EQ(rdma_disconnect(act), 0);
        e = next_event(ach, RDMA_CM_EVENT_DISCONNECTED);
        if (e != nullptr) rdma_ack_cm_event(e);
        e = next_event(pch, RDMA_CM_EVENT_DISCONNECTED);
        if (e != nullptr) rdma_ack_cm_event(e);
        EXPECT_EQ(ibv_dereg_mr(smr), 0);
        rdma_destroy_qp(act);
        EXPECT_EQ(rdma_destroy_id(act), 0);
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
        EXPECT_EQ(ibv_dereg_mr(rmr), 0);
        EXPECT_EQ(ibv_destroy_cq(cq), 0);
        EXPECT_EQ(ibv_dealloc_pd(pd), 0);
        EXPECT_EQ(rdma_destroy_id(child), 0);
    }

    rdma_event_channel* pch = nullptr;
    rdma_event_channel* ach = nullptr;
    rdma_cm_id* listen = nullptr;
    sockaddr_in at{};
};

TEST_F(IwarpAppQp, rdma_init_qp_attr_gives_iw_cm_attributes_and_the_qp_connects) {
    connect_to_app_qp([](rdma_cm_id* child, ibv_qp* qp) {
        for (const ibv_qp_state want : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
            SCOPED_TRACE(want);
            ibv_qp_attr attr{};
            attr.qp_state = want;
            int mask = -1;
            ASSERT_EQ(rdma_init_qp_attr(child, &attr, &mask), 0) << std::strerror(errno);
            if (want == IBV_QPS_RTS) {
                EXPECT_EQ(mask, 0);
            } else {
                EXPECT_EQ(attr.qp_state, IBV_QPS_INIT);
                EXPECT_EQ(mask & (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT),
                          IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT);
                EXPECT_EQ(attr.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
                EXPECT_EQ(attr.port_num, 1);
            }
            ASSERT_EQ(ibv_modify_qp(qp, &attr, mask), 0);
        }
        EXPECT_EQ(qp->state, IBV_QPS_INIT);
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_SQD;
        int mask = 0;
        EXPECT_EQ(rdma_init_qp_attr(child, &attr, &mask), -1);
        EXPECT_EQ(errno, EINVAL);
    });
}

TEST_F(IwarpAppQp, a_qp_left_as_created_is_bound_by_rdma_accept) {
    connect_to_app_qp([](rdma_cm_id*, ibv_qp* qp) { EXPECT_EQ(qp->state, IBV_QPS_RESET); });
}
