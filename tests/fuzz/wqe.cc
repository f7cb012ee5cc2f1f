// libFuzzer target: the daemon's copy-and-check of work requests (daemon/verbs/qp_glue.cc):
// to_send_wr on any send WQE against any QP caps, to_recv_wr on any receive WQE, and
// QpGlue::pop_recv over a receive ring whose every byte (indices included) the fuzzer
// writes, as a hostile client can. Asserts: a send WR the engines get either is the WQE as
// posted, within the QP's caps (opcode known, SGEs <= max_send_sge and kMaxSge, inline bytes
// <= max_inline_data and kMaxInline, copied exactly), or is the failing local operation
// (Local Invalidate of key 0, signaled); a receive WR never has more SGEs than the QP's
// max_recv_sge or kMaxSge; one drain of the ring yields at most its capacity of WRs.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "daemon/verbs/qp_glue.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"
#include "shm/ring.h"
#include "shm/wqe.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace snic;
using fuzz::Input;

void send_wqe(Input& in) {
    daemon::Qp qp;
    qp.type = in.u8() & 1 ? verbs::QpType::ud : verbs::QpType::rc;
    qp.sq_sig_all = in.u8() & 1;
    qp.cap.max_send_sge = in.u8() % 20;
    qp.cap.max_inline_data = in.u16() % 300;
    shm::SendWqe w;
    std::memset(&w, 0, sizeof w);
    const auto raw = in.bytes(sizeof w);
    std::memcpy(&w, raw.data(), raw.size());
    const verbs::SendWr wr = daemon::to_send_wr(w, qp);
    // In place over a slot that held another WR: the same WR, whatever that one left.
    shm::SendWqe other;
    std::memset(&other, 0xff, sizeof other);
    other.opcode = static_cast<std::uint8_t>(verbs::WrOp::rdma_write);
    other.flags = static_cast<std::uint8_t>(shm::kWqeInline | shm::kWqeFence);
    other.inline_length = 16;
    const std::uint32_t max_inline = qp.cap.max_inline_data;
    qp.cap.max_inline_data = shm::kMaxInline;
    verbs::SendWr slot;
    daemon::to_send_wr(other, qp, slot);
    qp.cap.max_inline_data = max_inline;
    daemon::to_send_wr(w, qp, slot);
    SNIC_FUZZ_REQUIRE(slot.wr_id == wr.wr_id && slot.op == wr.op && slot.signaled == wr.signaled &&
                      slot.fence == wr.fence && slot.solicited == wr.solicited &&
                      slot.inline_data == wr.inline_data && slot.imm_or_rkey == wr.imm_or_rkey &&
                      slot.remote_addr == wr.remote_addr && slot.rkey == wr.rkey &&
                      slot.compare_add == wr.compare_add && slot.swap == wr.swap &&
                      slot.num_sge == wr.num_sge && slot.inline_len == wr.inline_len);
    SNIC_FUZZ_REQUIRE(
        std::memcmp(
            slot.inline_data ? slot.inline_bytes.data() : static_cast<const void*>(slot.sge.data()),
            wr.inline_data ? wr.inline_bytes.data() : static_cast<const void*>(wr.sge.data()),
            wr.inline_data ? wr.inline_len : wr.num_sge * sizeof(verbs::Sge)) == 0);
    const bool is_inline = (w.flags & shm::kWqeInline) != 0;
    const bool valid =
        w.opcode < verbs::kWrOpCount &&
        (is_inline ? w.inline_length <= std::min(shm::kMaxInline, qp.cap.max_inline_data)
                   : w.num_sge <= std::min(shm::kMaxSge, qp.cap.max_send_sge));
    if (!valid) {
        SNIC_FUZZ_REQUIRE(wr.op == verbs::WrOp::local_inv && wr.imm_or_rkey == 0 && wr.signaled);
        SNIC_FUZZ_REQUIRE(wr.num_sge == 0 && !wr.inline_data);
        return;
    }
    SNIC_FUZZ_REQUIRE(static_cast<std::uint8_t>(wr.op) == w.opcode);
    SNIC_FUZZ_REQUIRE(wr.wr_id == w.wr_id);
    SNIC_FUZZ_REQUIRE(wr.signaled == ((w.flags & shm::kWqeSignaled) != 0 || qp.sq_sig_all != 0));
    if (is_inline) {
        SNIC_FUZZ_REQUIRE(wr.inline_data && wr.inline_len == w.inline_length);
        SNIC_FUZZ_REQUIRE(wr.inline_len <= verbs::kMaxInline);
        SNIC_FUZZ_REQUIRE(std::memcmp(wr.inline_bytes.data(), w.inline_data, wr.inline_len) == 0);
    } else {
        SNIC_FUZZ_REQUIRE(!wr.inline_data && wr.num_sge == w.num_sge);
        SNIC_FUZZ_REQUIRE(wr.num_sge <= verbs::kMaxSge && wr.num_sge <= qp.cap.max_send_sge);
        for (std::uint32_t i = 0; i < wr.num_sge; ++i)
            SNIC_FUZZ_REQUIRE(wr.sge[i].addr == w.sge[i].addr &&
                              wr.sge[i].length == w.sge[i].length &&
                              wr.sge[i].lkey == w.sge[i].lkey);
    }
}

void recv_wqe(Input& in) {
    const std::uint32_t max_sge = in.u8() % 20;
    shm::RecvWqe w;
    std::memset(&w, 0, sizeof w);
    const auto raw = in.bytes(sizeof w);
    std::memcpy(&w, raw.data(), raw.size());
    const verbs::RecvWr wr = daemon::to_recv_wr(w, max_sge);
    SNIC_FUZZ_REQUIRE(wr.wr_id == w.wr_id);
    SNIC_FUZZ_REQUIRE(wr.num_sge <= std::min(verbs::kMaxSge, max_sge));
    if (w.num_sge <= std::min(verbs::kMaxSge, max_sge)) SNIC_FUZZ_REQUIRE(wr.num_sge == w.num_sge);
}

// A receive ring formatted as libsnic formats it, then overwritten by the client.
void recv_ring(Input& in) {
    alignas(shm::kRingCacheLine) static std::array<std::byte, 16384> mem;
    const std::uint32_t capacity = 1u << (in.u8() % 5);
    const std::size_t bytes = shm::ring_bytes<shm::RecvWqe>(capacity);
    SNIC_FUZZ_REQUIRE(bytes <= mem.size());
    std::memset(mem.data(), 0, mem.size());
    const std::span<std::byte> ring(mem.data(), bytes);
    auto consumer = shm::RingConsumer<shm::RecvWqe>::init(ring, capacity, in.u32());
    SNIC_FUZZ_REQUIRE(static_cast<bool>(consumer));

    daemon::Qp qp;
    shm::QpControl control{};
    qp.control = &control;
    qp.cap.max_recv_sge = in.u8() % 20;
    qp.rq.emplace(*consumer);
    // The client's writes: anywhere in the ring, header included.
    for (std::uint8_t n = in.u8() % 16; n > 0 && !in.empty(); --n) {
        const std::size_t at = in.u16() % bytes;
        const auto b = in.bytes(in.u8() % 64);
        std::memcpy(mem.data() + at, b.data(), std::min(b.size(), bytes - at));
    }
    daemon::NameTable keys(4, daemon::kKeyFormat, 1);
    daemon::QpGlue glue(qp, keys);
    std::uint32_t popped = 0;
    verbs::RecvWr wr;
    while (popped <= 2 * capacity && glue.pop_recv(wr)) {
        ++popped;
        SNIC_FUZZ_REQUIRE(wr.num_sge <= std::min(verbs::kMaxSge, qp.cap.max_recv_sge));
    }
    SNIC_FUZZ_REQUIRE(popped <= capacity);  // one snapshot of the producer index at most
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Input in(data, size);
    switch (in.u8() % 3) {
        case 0:
            send_wqe(in);
            break;
        case 1:
            recv_wqe(in);
            break;
        case 2:
            recv_ring(in);
            break;
    }
    return 0;
}
