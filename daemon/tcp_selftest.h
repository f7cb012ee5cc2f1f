// The TCP self-tests: snic's TCP (daemon/iwarp/tcp_stack.h, through its byte-stream API) against
// any TCP peer, the Linux kernel's in the tests, without iWARP.
//
//   tcp-send,dst=IP:PORT,bytes=N[,record=B]: connects, sends N bytes of a fixed pseudo-random
//     stream (a 1,000,003-byte pattern repeated: no segment, record or buffer size divides
//     it, so a byte misplaced by a multiple of any of them changes the checksum) in B-byte
//     records, half-closes, and reads the peer's answer "<bytes> <crc32 hex>\n" to its FIN.
//     Passes when the peer counted N bytes with the CRC-32 of what was sent.
//   tcp-sink,port=P[,count=N]: listens on P and takes N connections (at most 8 at once): reads
//     each to the peer's FIN into posted buffers, answers "<bytes> <crc32 hex>\n" and closes.
//     Ends once N connections ended, however they ended (the report says how).
//
// Both report throughput (payload bytes from ESTABLISHED to the last byte acknowledged or
// received), and the engine's retransmissions, in one line or one JSON object.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/iwarp/tcp_service.h"
#include "daemon/selftest.h"

namespace snic::daemon {

// The stream tcp-send sends: byte i is pattern()[i % kTcpPatternPeriod].
inline constexpr std::uint32_t kTcpPatternPeriod = 1'000'003;
// The pattern and `extra` bytes more of it (so that any slice up to `extra` bytes long from an
// offset below the period is contiguous).
std::vector<std::uint8_t> tcp_pattern(std::uint32_t extra);

class TcpSendTest final : public Selftest, public TcpStreamOwner {
  public:
    TcpSendTest(const SelftestSpec& spec, TcpService& tcp, std::uint64_t tsc_hz,
                std::atomic<bool>& stop);

    bool poll(std::uint64_t now) override;
    void on_tcp_event(const TcpStreamEvent& e) override;
    bool passed() const override { return failure_.empty() && verified_; }
    std::string report() const override;

  private:
    enum class Phase { start, connecting, sending, done };
    bool push();
    void check_reply();
    void fail(std::string why);
    void finish();

    const SelftestSpec spec_;
    TcpService& tcp_;
    TcpStack& stack_;
    const std::uint64_t tsc_hz_;
    std::atomic<bool>& stop_;
    std::vector<std::uint8_t> pattern_;
    Phase phase_ = Phase::start;
    TcpHandle conn_;
    std::uint32_t record_ = 0;
    std::uint64_t sent_ = 0;  // bytes queued
    std::uint32_t crc_ = ~0u;
    bool closed_ = false, fin_ = false, reply_done_ = false, verified_ = false;
    std::array<std::byte, 128> reply_{};
    std::uint64_t reply_len_ = 0;
    std::uint64_t t_connected_ = 0, t_acked_ = 0, last_progress_ = 0, acked_seen_ = 0;
    std::string failure_;
    std::string peer_answer_;
    // The connection's figures, kept when it is done (the handle may go stale after).
    tcp::TcpInfo info_;
    std::uint64_t retransmits_ = 0, fast_retransmits_ = 0, timeouts_ = 0, segments_out_ = 0;
    std::uint64_t probes_ = 0;  // tail-loss probes among the retransmits
    std::uint64_t segments_in_ = 0;
};

class TcpSinkTest final : public Selftest, public TcpStreamOwner {
  public:
    TcpSinkTest(const SelftestSpec& spec, TcpService& tcp, std::uint64_t tsc_hz,
                std::atomic<bool>& stop);

    bool poll(std::uint64_t now) override;
    void on_tcp_event(const TcpStreamEvent& e) override;
    bool passed() const override { return failure_.empty() && ended_ == spec_.count; }
    std::string report() const override;

  private:
    static constexpr std::size_t kSlots = 8;
    // Buffers of a quarter of the receive window, twice the window posted: the window is
    // never short for want of a buffer the check has not given back.
    static constexpr std::size_t kBufs = 8;
    const std::size_t buf_size_;

    struct Slot {
        TcpHandle conn;
        TcpFourTuple tuple;
        std::uint64_t posted = 0;  // buffers posted, in all
        std::uint64_t done = 0;    // and returned
        std::uint64_t bytes = 0;   // stream bytes checksummed
        std::uint32_t crc = ~0u;
        bool fin = false, replied = false;
        std::uint64_t t_start = 0, t_fin = 0;
        std::unique_ptr<std::byte[]> bufs;  // kBufs * buf_size_
    };
    struct Ended {
        TcpFourTuple tuple;
        std::uint64_t bytes = 0;
        std::uint32_t crc = 0;
        bool fin = false, replied = false;
        TcpStreamEventKind how = TcpStreamEventKind::closed;
        double seconds = 0;
    };
    Slot* slot_of(TcpHandle h);
    void post(Slot& s);
    void maybe_reply(Slot& s);
    void finish();

    const SelftestSpec spec_;
    TcpService& tcp_;
    TcpStack& stack_;
    const std::uint64_t tsc_hz_;
    std::atomic<bool>& stop_;
    bool listening_ = false;
    TcpHandle listener_;
    std::array<Slot, kSlots> slots_;
    std::vector<Ended> ended_list_;  // reserved to count
    std::uint32_t ended_ = 0;
    std::uint64_t refused_ = 0;  // incoming connections beyond kSlots: aborted
    std::string failure_;
};

// A tcp-* self-test on `tcp` (the first port's), or nullptr for another name.
std::unique_ptr<Selftest> make_tcp_selftest(const SelftestSpec& spec, TcpService& tcp,
                                            std::uint64_t tsc_hz, std::atomic<bool>& stop);

}  // namespace snic::daemon
