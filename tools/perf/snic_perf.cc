// snic-perf: latency and bandwidth of RDMA over snic, in perftest's vocabulary.
//
//   snic-perf TEST [options] [SERVER]       TEST: send_lat write_lat read_lat atomic_lat
//                                                 send_bw write_bw read_bw
//
// Without SERVER it is the server and waits for one client on TCP port -p; with SERVER it
// is the client. Over that connection the two check that they run the same test, agree on
// the path MTU and exchange each QP's number, PSN, GID, rkey and buffer address; then they
// connect RC QPs (INIT, RTR, RTS), run, and meet at a sync after each size. --loopback runs both
// ends in one process and one thread through two devices (the two ports of one snicd's virtual
// wire, typically), alternating between them, so that the measurement needs one core.
//
// Latency tests time every iteration: send_lat and write_lat are ping-pongs (a SEND answered
// by a SEND; an RDMA WRITE answered by a WRITE, detected by polling memory), read_lat and
// atomic_lat one READ or fetch-and-add until its completion. All figures are ROUND TRIPS in
// microseconds (perftest prints half of them for send_lat and write_lat as "t_typical").
// Bandwidth tests post from the client (or the first device), round robin over the -q QPs
// with up to -t WRs in flight on each, and report messages per second and payload
// bandwidth. After each size the bytes that arrived are checked once against the pattern
// that was sent (atomic_lat: the counter), outside the timed loop.
//
// -R (perftest's --rdma_cm) creates and connects the QPs through rdma_cm instead (cm.h): the
// server listens on its device's IPv4 address at port -p + 1 and tells the client where over
// the exchange, which then carries only the rkeys, buffer addresses and syncs; with
// --loopback the peer device listens and -d connects, in this one thread. iWARP devices
// (NAME_iwN) need -R: their QPs connect through rdma_cm only. A port's RoCE and iWARP
// devices share its address, and libsnic's rdma_cm takes an address to the first device
// that has it: SNIC_DEVICES must name the iWARP devices of the run.
//
// --idle-qps N[,N...] measures beside N established RC QPs that carry nothing (each connected to
// itself, spread over the ends of this process), for each N in turn: the idle set grows or
// shrinks between measurements, so that one run compares the same measured QPs at every N.
//
// Uses only <infiniband/verbs.h> and <rdma/rdma_cma.h>; linked with libsnic, which provides
// both. Exit 0, 1 on a run-time failure (a verb failed, a completion in error, data that does
// not match), 2 on a usage error.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tools/perf/cm.h"
#include "tools/perf/end.h"
#include "tools/perf/oob.h"
#include "tools/perf/options.h"
#include "tools/perf/perf.h"
#include "tools/perf/report.h"
#include "tools/perf/runs.h"

namespace snic::perf {

namespace {

constexpr int kExitFail = 1;

// --loopback's default peer: another port of the same daemon (devices are DAEMON_i and
// DAEMON_iwi), else any other device; of the same kind (RoCE or iWARP) as `mine`.
std::string sibling_device(const End& mine) {
    const auto daemon = [](const std::string& dev) { return dev.substr(0, dev.rfind('_')); };
    std::string any;
    for (const DeviceEntry& d : devices()) {
        if (d.name == mine.name() || d.iwarp != mine.iwarp()) continue;
        if (daemon(d.name) == daemon(mine.name())) return d.name;
        if (any.empty()) any = d.name;
    }
    if (any.empty()) failf("--loopback needs a second device (--peer-device)");
    return any;
}

// What an iWARP device cannot do: a QP connected by Modify QP (-R is the way), or to itself.
void check_iwarp(const End& e, const Options& o) {
    if (!e.iwarp()) return;
    if (!o.rdma_cm)
        failf(
            "%s is an iWARP device: its QPs connect through rdma_cm only, as on an iWARP RNIC "
            "(add -R)",
            e.name().c_str());
    for (std::uint32_t n : o.idle_qps)
        if (n != 0)
            failf(
                "--idle-qps: the idle QPs connect each to itself with Modify QP, which %s, an "
                "iWARP device, does not take",
                e.name().c_str());
}

void run_sizes(Run& r, std::uint32_t mtu, std::uint32_t idle, bool& header);

int run_all(const Options& o) {
    std::uint32_t max_size = 0;
    for (std::uint32_t s : o.sizes) max_size = std::max(max_size, s);
    const Test t = o.test->test;
    std::optional<End> a, b;
    std::optional<Oob> oob;
    std::optional<CmLink> cm;  // -R: owns the QPs, so it goes before the End
    std::string dev = o.device;
    a.emplace(dev, o, max_size);
    check_iwarp(*a, o);
    // A RoCE packet larger than the port's active MTU would not fit the Ethernet frame.
    std::uint32_t mtu = o.mtu != 0 ? std::min(o.mtu, a->active_mtu()) : a->active_mtu();
    if (o.mtu > mtu)
        std::fprintf(stderr, "%s: -m %u is above %s's active MTU; using %u\n", kProg, o.mtu,
                     a->name().c_str(), mtu);
    if (o.loopback) {
        std::string peer = o.peer_device;
        if (peer.empty()) peer = sibling_device(*a);
        if (peer == a->name()) failf("--loopback needs two different devices");
        b.emplace(peer, o, max_size);
        check_iwarp(*b, o);
        if (o.rdma_cm) {
            cm.emplace(*b, o);  // the peer device listens, -d connects
            cm->connect_loopback(*a, *b, o);
            mtu = a->path_mtu();
            a->set_peer(b->info());
            b->set_peer(a->info());
        } else {
            mtu = std::min(mtu, b->active_mtu());
            a->connect(b->info(), mtu);
            b->connect(a->info(), mtu);
        }
    } else if (o.rdma_cm) {
        cm.emplace(*a, o);  // the server listens before it waits for the exchange
        oob.emplace(o);
        oob->hello(o, mtu);
        cm->connect(*a, o, *oob);
        mtu = a->path_mtu();  // rdma_cm's choice: the route's
        a->set_peer(oob->exchange(a->info()));
    } else {
        oob.emplace(o);
        mtu = oob->hello(o, mtu);
        a->connect(oob->exchange(a->info()), mtu);
    }
    Run r{o, &*a, b ? &*b : nullptr, o.server.has_value() || o.loopback, oob ? &*oob : nullptr};
    if (!o.json) {
        std::printf("%s: %s%s, %s%s%s, RC%s, path MTU %u, %u QP(s), inline up to %u B\n", kProg,
                    o.test->name.data(),
                    o.loopback ? " --loopback" : (r.client ? " client" : " server"),
                    a->name().c_str(), b ? " <-> " : "", b ? b->name().c_str() : "",
                    o.rdma_cm ? " via rdma_cm" : "", mtu, o.qps, a->max_inline());
        if (o.test->latency)
            std::printf("%s: figures are ROUND TRIPS in microseconds%s\n", kProg,
                        t == Test::send_lat || t == Test::write_lat
                            ? " (perftest's t_typical is half a round trip)"
                            : ", post to completion");
        else
            std::printf("%s: payload bandwidth, up to %u WRs in flight per QP\n", kProg,
                        o.tx_depth);
    }

    bool header = true;
    for (std::uint32_t idle : o.idle_qps) {
        // The idle QPs, half on each end of a loopback.
        r.a->set_idle(r.b != nullptr ? idle - idle / 2 : idle);
        if (r.b != nullptr) r.b->set_idle(idle / 2);
        if (!o.json && (idle != 0 || o.idle_qps.size() > 1) && r.client)
            std::printf("%s: beside %u established idle RC QPs\n", kProg, idle);
        run_sizes(r, mtu, idle, header);
    }
    if (oob) oob->sync();
    return 0;
}

// Every size of the run, with `idle` idle QPs beside the measured ones.
void run_sizes(Run& r, std::uint32_t mtu, std::uint32_t idle, bool& header) {
    const Options& o = r.o;
    const Test t = o.test->test;
    Oob* oob = r.oob;
    for (std::uint32_t size : o.sizes) {
        // Patterns in every send area; receive areas cleared; receive queues full (once:
        // each receive consumed is posted again).
        for (End* e : {r.a, r.b}) {
            if (e == nullptr) continue;
            fill_pattern(e->send_area(), size, size);
            std::memset(e->recv_area(), 0, size);
            if (header && (t == Test::send_lat || t == Test::send_bw))
                for (std::uint32_t j = 0; j < e->qps(); ++j)
                    for (std::uint32_t k = 0; k < e->rx_depth(); ++k) e->post_recv(j);
        }
        if (oob) oob->sync();  // both sides posted their receives
        if (o.test->latency) {
            std::vector<double> us = run_latency(r, size);
            if (oob) oob->sync();
            if (r.client) print_latency(o, size, mtu, idle, us, header);
        } else {
            const BwResult res = run_bandwidth(r, size);
            if (oob) oob->sync();
            if (r.client) print_bandwidth(o, size, mtu, idle, res, header);
        }
        header = false;
        // The data that landed, where it landed.
        if (r.b != nullptr) {
            End& target = (t == Test::read_lat || t == Test::read_bw) ? *r.a : *r.b;
            check_data(r, size, target.recv_area(), target.name().c_str());
        } else if (r.client == (t == Test::read_lat || t == Test::read_bw)) {
            check_data(r, size, r.a->recv_area(), r.a->name().c_str());
        }
    }
}

}  // namespace

}  // namespace snic::perf

int main(int argc, char** argv) {
    const snic::perf::Options o = snic::perf::parse_options(argc, argv);
    std::srand(static_cast<unsigned>(::getpid()));
    try {
        return snic::perf::run_all(o);
    } catch (const snic::perf::Failure& f) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: %s\n", snic::perf::kProg, f.what());
        return snic::perf::kExitFail;
    }
}
