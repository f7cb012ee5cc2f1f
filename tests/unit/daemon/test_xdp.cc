// snicd's XDP program for shared-address ports (daemon/port/xdp/snic_xdp.bpf.c), loaded into
// the kernel and run on frames with BPF_PROG_TEST_RUN, its maps set through XdpMaps as snicd
// sets them: what is snicd's (RoCEv2 and its TCP ports, to its address) is told apart from
// what stays the kernel's. No AF_XDP socket is bound in these tests, so a frame that is
// snicd's is counted as no_sock and passed; one that is the kernel's is counted as passed.
#include "daemon/port/xdp_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace snic::daemon {
namespace {

constexpr std::uint32_t kOurs = 0xc6121401;   // 198.18.20.1
constexpr std::uint32_t kOther = 0xc6121402;  // 198.18.20.2
constexpr std::uint8_t kUdp = 17, kTcp = 6, kIcmp = 1;

void put16(std::vector<std::uint8_t>& f, std::size_t at, std::uint16_t v) {
    f[at] = static_cast<std::uint8_t>(v >> 8);
    f[at + 1] = static_cast<std::uint8_t>(v);
}
void put32(std::vector<std::uint8_t>& f, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) f[at + i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}

// Ethernet + IPv4 (no options) + 20 bytes of L4 header and 16 of payload; the program reads
// the L4 ports only.
std::vector<std::uint8_t> frame(std::uint8_t proto, std::uint32_t dst, std::uint16_t dport,
                                std::uint16_t ethertype = 0x0800, std::uint16_t frag = 0) {
    std::vector<std::uint8_t> f(14 + 20 + 20 + 16, 0);
    put16(f, 12, ethertype);
    f[14] = 0x45;
    put16(f, 16, static_cast<std::uint16_t>(f.size() - 14));
    put16(f, 20, frag);
    f[22] = 64;
    f[23] = proto;
    put32(f, 26, 0xc6121409);
    put32(f, 30, dst);
    put16(f, 34, 40000);
    put16(f, 36, dport);
    return f;
}

class XdpProgram : public ::testing::Test {
  protected:
    void SetUp() override {
        obj_ = bpf_object__open_file(SNIC_XDP_OBJECT, nullptr);
        ASSERT_NE(obj_, nullptr) << SNIC_XDP_OBJECT << ": " << std::strerror(errno);
        if (const int err = bpf_object__load(obj_); err != 0) {
            if (err == -EPERM) GTEST_SKIP() << "no permission to load BPF programs here";
            FAIL() << "cannot load " << SNIC_XDP_OBJECT << ": " << std::strerror(-err);
        }
        bpf_program* prog = bpf_object__find_program_by_name(obj_, "snic_xdp");
        ASSERT_NE(prog, nullptr);
        prog_fd_ = bpf_program__fd(prog);
        auto maps = XdpMaps::of_program(prog_fd_);
        ASSERT_TRUE(maps.ok()) << maps.error().message;
        maps_.emplace(std::move(*maps));
    }
    void TearDown() override {
        maps_.reset();
        if (obj_ != nullptr) bpf_object__close(obj_);
    }

    // The program's verdict on `f`.
    std::uint32_t run(const std::vector<std::uint8_t>& f) {
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = f.data(),
                    .data_size_in = static_cast<__u32>(f.size()));
        EXPECT_EQ(bpf_prog_test_run_opts(prog_fd_, &opts), 0) << std::strerror(errno);
        return opts.retval;
    }
    XdpCounts counts() {
        auto c = maps_->counts();
        EXPECT_TRUE(c.ok());
        return c.ok() ? *c : XdpCounts{};
    }
    // Runs `f` and says whom the program gave it to: true for snicd, false for the kernel.
    bool for_snicd(const std::vector<std::uint8_t>& f) {
        const XdpCounts before = counts();
        EXPECT_EQ(run(f), static_cast<std::uint32_t>(XDP_PASS)) << "no socket: passed either way";
        const XdpCounts after = counts();
        const std::uint64_t theirs = after.passed - before.passed;
        const std::uint64_t ours = after.no_sock - before.no_sock;
        EXPECT_EQ(theirs + ours, 1u);
        return ours == 1;
    }

    bpf_object* obj_ = nullptr;
    int prog_fd_ = -1;
    std::optional<XdpMaps> maps_;
};

TEST_F(XdpProgram, nothing_is_snicds_before_it_has_an_address) {
    EXPECT_FALSE(for_snicd(frame(kUdp, kOurs, 4791)));
    EXPECT_FALSE(for_snicd(frame(kUdp, 0, 4791)));
}

TEST_F(XdpProgram, rocev2_to_its_address_is_snicds) {
    ASSERT_TRUE(maps_->set_address(kOurs).ok());
    EXPECT_TRUE(for_snicd(frame(kUdp, kOurs, 4791)));
    EXPECT_FALSE(for_snicd(frame(kUdp, kOther, 4791))) << "another address";
    EXPECT_FALSE(for_snicd(frame(kUdp, kOurs, 53))) << "the kernel's UDP";
    EXPECT_FALSE(for_snicd(frame(kUdp, kOurs, 4791, 0x0800, 0x2000))) << "a first fragment";
    EXPECT_FALSE(for_snicd(frame(kUdp, kOurs, 4791, 0x0800, 0x0010))) << "a later fragment";
    EXPECT_FALSE(for_snicd(frame(kUdp, kOurs, 4791, 0x0806))) << "not IPv4";
    EXPECT_FALSE(for_snicd(frame(kIcmp, kOurs, 4791))) << "ICMP is the kernel's";
}

TEST_F(XdpProgram, tcp_is_snicds_on_the_ports_it_holds) {
    ASSERT_TRUE(maps_->set_address(kOurs).ok());
    EXPECT_FALSE(for_snicd(frame(kTcp, kOurs, 7000))) << "not held yet";
    ASSERT_TRUE(maps_->hold_tcp_port(7000, true).ok());
    EXPECT_TRUE(for_snicd(frame(kTcp, kOurs, 7000)));
    EXPECT_FALSE(for_snicd(frame(kTcp, kOurs, 22))) << "the kernel's sshd";
    EXPECT_FALSE(for_snicd(frame(kTcp, kOther, 7000))) << "another address";
    ASSERT_TRUE(maps_->hold_tcp_port(7000, false).ok());
    EXPECT_FALSE(for_snicd(frame(kTcp, kOurs, 7000))) << "given back";
}

TEST_F(XdpProgram, short_and_odd_frames_go_to_the_kernel) {
    ASSERT_TRUE(maps_->set_address(kOurs).ok());
    std::vector<std::uint8_t> f = frame(kUdp, kOurs, 4791);
    f.resize(14 + 20 + 4);  // the UDP header cut short
    EXPECT_FALSE(for_snicd(f));
    f = frame(kUdp, kOurs, 4791);
    f[14] = 0x44;  // IHL 4
    EXPECT_FALSE(for_snicd(f));
    f = frame(kUdp, kOurs, 4791);
    f[14] = 0x65;  // version 6
    EXPECT_FALSE(for_snicd(f));
}

TEST_F(XdpProgram, a_program_without_snicds_maps_is_refused) {
    // The map lookup by program is what snicd does on the interface; a program of someone
    // else's must not be taken for snicd's. An fd that is no program fails as well.
    EXPECT_FALSE(XdpMaps::of_program(-1).ok());
}

}  // namespace
}  // namespace snic::daemon
