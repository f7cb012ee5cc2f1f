// What the engine targets of every transport take from the fuzzer besides their wire: the
// fake memory's regions (keys, places and rights chosen so that every check of an engine has
// a key that passes and one that fails it), keys and addresses near them, and receive and
// send WRs built from chosen fields.
#pragma once

#include <array>
#include <cstdint>

#include "proto/verbs/wr.h"
#include "tests/fuzz/fuzz_support.h"

namespace snic::fuzz {

// The fake memory's regions: keys, places and rights chosen so that every check of the
// engines has a key that passes and one that fails it.
struct RegionSpec {
    std::uint32_t key;
    std::uint64_t va;
    std::uint32_t len;
    std::uint32_t access;
    std::uint32_t pd;  // 0: the QP's
};
inline constexpr std::uint32_t kAll = verbs::access::local_write | verbs::access::remote_read |
                                      verbs::access::remote_write | verbs::access::remote_atomic;
inline constexpr std::array<RegionSpec, 6> kRegions = {{
    {0x1000, 0x10000, 4096, kAll, 0},                        // everything
    {0x2000, 0x20000, 1024, verbs::access::remote_read, 0},  // read only, both ways
    {0x3000, 0x30000, 512, verbs::access::remote_write, 0},  // remote write, no local write
    {0x4000, 0x40000, 64, kAll, 0},                          // small: atomics, bounds
    {0x5000, 0x50000, 256, kAll, 7},                         // another PD
    {0x6000, 0x60000, 128, verbs::access::local_write, 0},   // local only
}};

inline void add_regions(GuardedMemory& mem) {
    std::uint8_t fill = 0x11;
    for (const RegionSpec& r : kRegions) mem.add(r.key, r.va, r.len, r.access, fill += 0x22, r.pd);
}

// A key: one of the regions' (or a window's), or any.
inline std::uint32_t pick_key(Input& in) {
    const std::uint8_t b = in.u8();
    if (b < 6 * 40) return kRegions[b % 6].key;
    if (b < 250) return 0x7000 + (b & 3);  // windows bound by send WRs
    return in.u32();
}
// An address near a region, or any.
inline std::uint64_t pick_addr(Input& in, std::uint32_t key) {
    const std::uint8_t how = in.u8();
    std::uint64_t base = 0x10000;
    for (const RegionSpec& r : kRegions)
        if (r.key == key) base = r.va;
    if (how < 200) return base + in.u16() % 4200;
    if (how < 250) return base - in.u8() + (std::uint64_t{in.u16()} << (how & 31));
    return in.u64();
}
inline std::uint32_t pick_len(Input& in) {
    const std::uint8_t how = in.u8();
    if (how < 128) return in.u8();
    if (how < 250) return in.u16() % 8400;
    return in.u32();
}

inline void fill_sges(Input& in, std::uint32_t n, std::array<verbs::Sge, verbs::kMaxSge>& sge) {
    for (std::uint32_t i = 0; i < n; ++i) {
        sge[i].lkey = pick_key(in);
        sge[i].addr = pick_addr(in, sge[i].lkey);
        sge[i].length = pick_len(in);
    }
}

inline verbs::RecvWr recv_wr(Input& in, std::uint64_t id) {
    verbs::RecvWr wr;
    wr.wr_id = id;
    wr.num_sge = in.u8() % 5;
    fill_sges(in, wr.num_sge, wr.sge);
    return wr;
}

// Any opcode, flags, keys of the regions or windows, inline or SGEs.
inline verbs::SendWr send_wr(Input& in, std::uint64_t id) {
    verbs::SendWr wr;
    wr.wr_id = id;
    wr.op = static_cast<verbs::WrOp>(in.u8() % verbs::kWrOpCount);
    const std::uint8_t flags = in.u8();
    wr.signaled = flags & 1;
    wr.fence = flags & 2;
    wr.solicited = flags & 4;
    wr.imm_or_rkey = (flags & 8) ? pick_key(in) : in.u32();
    wr.rkey = pick_key(in);
    wr.remote_addr = pick_addr(in, wr.rkey);
    if ((flags & 16) == 0) wr.remote_addr &= ~7ull;
    wr.compare_add = in.u64();
    wr.swap = in.u64();
    if (wr.op == verbs::WrOp::bind_mw) {
        wr.bind.mw_handle = 1;
        wr.bind.new_rkey = 0x7000 + (in.u8() & 3);
        wr.bind.mr_lkey = pick_key(in);
        wr.bind.access = in.u8() & kAll;
        wr.bind.addr = pick_addr(in, wr.bind.mr_lkey);
        wr.bind.length = pick_len(in);
    }
    if (flags & 32) {
        wr.inline_data = true;
        wr.inline_len = in.u16() % (verbs::kMaxInline + 1);
        for (std::uint32_t i = 0; i < wr.inline_len; ++i) wr.inline_bytes[i] = flags;
    } else {
        wr.num_sge = in.u8() % 5;
        fill_sges(in, wr.num_sge, wr.sge);
    }
    return wr;
}

}  // namespace snic::fuzz
