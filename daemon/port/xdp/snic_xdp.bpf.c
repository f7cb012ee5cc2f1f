// snicd's XDP program for a port that shares its address with the kernel (--port
// iface=IF,shared). It runs on IF's receive path and sends snicd, through its AF_XDP
// socket, only the frames that are snicd's:
//
//   - RoCEv2: IPv4/UDP to port 4791, to the port's address;
//   - iWARP: IPv4/TCP to the port's address and to a port snicd holds (a listener's, or the
//     local port of one of its connections), as snicd writes them into snic_tcp_ports.
//
// Everything else goes on to the kernel (XDP_PASS): ARP, ICMP, the kernel's own TCP and
// UDP, IP fragments (snicd does not reassemble), other addresses. Counted per CPU in
// snic_xdp_counts by verdict, which snicd reads for its port counters.
//
// Built with clang -target bpf by meson (daemon/meson.build); loaded by DPDK's af_xdp PMD
// (its xdp_prog argument), which puts its socket into xsks_map by queue.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define SNIC_ROCE_PORT 4791
#define SNIC_MAX_QUEUES 64

// The PMD's AF_XDP sockets, by receive queue (the name is the PMD's).
struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, SNIC_MAX_QUEUES);
    __type(key, __u32);
    __type(value, __u32);
} xsks_map SEC(".maps");

// 0: the port's IPv4 address (network order; 0 until snicd has set it: nothing is
// redirected before).
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} snic_xdp_addr SEC(".maps");

// By local TCP port (host order): 1 when the port is snicd's.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u8);
} snic_tcp_ports SEC(".maps");

enum snic_xdp_count {
    SNIC_XDP_ROCE = 0,     // redirected: RoCEv2
    SNIC_XDP_TCP = 1,      // redirected: a TCP port of snicd's
    SNIC_XDP_PASSED = 2,   // passed to the kernel
    SNIC_XDP_NO_SOCK = 3,  // snicd's, but no socket on the queue: passed (the kernel drops it)
    SNIC_XDP_COUNTS = 4,
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, SNIC_XDP_COUNTS);
    __type(key, __u32);
    __type(value, __u64);
} snic_xdp_counts SEC(".maps");

static __always_inline int count(__u32 which, int verdict) {
    __u64* n = bpf_map_lookup_elem(&snic_xdp_counts, &which);
    if (n) *n += 1;
    return verdict;
}

static __always_inline int to_snicd(struct xdp_md* ctx, __u32 which) {
    const __u32 queue = ctx->rx_queue_index;
    if (!bpf_map_lookup_elem(&xsks_map, &queue)) return count(SNIC_XDP_NO_SOCK, XDP_PASS);
    count(which, XDP_REDIRECT);
    return bpf_redirect_map(&xsks_map, queue, XDP_PASS);
}

SEC("xdp")
int snic_xdp(struct xdp_md* ctx) {
    void* data = (void*)(long)ctx->data;
    void* end = (void*)(long)ctx->data_end;

    struct ethhdr* eth = data;
    if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return count(SNIC_XDP_PASSED, XDP_PASS);
    struct iphdr* ip = (void*)(eth + 1);
    if ((void*)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
        return count(SNIC_XDP_PASSED, XDP_PASS);
    // A fragment (more fragments, or an offset) is the kernel's to reassemble.
    if (ip->frag_off & bpf_htons(0x3fff)) return count(SNIC_XDP_PASSED, XDP_PASS);
    const __u32 zero = 0;
    const __u32* addr = bpf_map_lookup_elem(&snic_xdp_addr, &zero);
    if (!addr || *addr == 0 || ip->daddr != *addr) return count(SNIC_XDP_PASSED, XDP_PASS);

    void* l4 = (void*)ip + ip->ihl * 4;
    if (ip->protocol == IPPROTO_UDP) {
        struct udphdr* udp = l4;
        if ((void*)(udp + 1) > end) return count(SNIC_XDP_PASSED, XDP_PASS);
        if (udp->dest == bpf_htons(SNIC_ROCE_PORT)) return to_snicd(ctx, SNIC_XDP_ROCE);
    } else if (ip->protocol == IPPROTO_TCP) {
        struct tcphdr* tcp = l4;
        if ((void*)(tcp + 1) > end) return count(SNIC_XDP_PASSED, XDP_PASS);
        const __u32 port = bpf_ntohs(tcp->dest);
        const __u8* ours = bpf_map_lookup_elem(&snic_tcp_ports, &port);
        if (ours && *ours) return to_snicd(ctx, SNIC_XDP_TCP);
    }
    return count(SNIC_XDP_PASSED, XDP_PASS);
}

char _license[] SEC("license") = "Apache-2.0";  // the project's; no GPL-only helper is called
