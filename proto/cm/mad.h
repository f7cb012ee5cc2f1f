// The common MAD header (IBA vol 1 §13.4.2) as the communication manager uses it: 256-byte
// MADs of management class 0x07 (CM), base version 1, class version 2, method Send, whose
// 232 bytes of data after the 24-byte header carry one CM message (messages.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace snic::cm {

inline constexpr std::size_t kMadSize = 256;
inline constexpr std::size_t kMadHeaderSize = 24;
inline constexpr std::size_t kMadDataSize = kMadSize - kMadHeaderSize;  // 232

inline constexpr std::uint8_t kMadBaseVersion = 1;
inline constexpr std::uint8_t kMgmtClassCm = 0x07;
inline constexpr std::uint8_t kCmClassVersion = 2;
inline constexpr std::uint8_t kMethodSend = 0x03;

using Mad = std::array<std::uint8_t, kMadSize>;
using MadData = std::span<std::uint8_t, kMadDataSize>;
using ConstMadData = std::span<const std::uint8_t, kMadDataSize>;

// The header's fields in host order. Layout (bytes): 0 base version, 1 management class,
// 2 class version, 3 R bit and method, 4-5 status, 6-7 class specific, 8-15 transaction ID,
// 16-17 attribute ID, 18-19 reserved, 20-23 attribute modifier.
struct MadHeader {
    std::uint8_t base_version = kMadBaseVersion;
    std::uint8_t mgmt_class = kMgmtClassCm;
    std::uint8_t class_version = kCmClassVersion;
    std::uint8_t method = kMethodSend;
    std::uint16_t status = 0;
    std::uint16_t class_specific = 0;
    std::uint64_t tid = 0;
    std::uint16_t attr_id = 0;
    std::uint32_t attr_mod = 0;
};

// Why parse_mad refused a MAD; the caller counts them.
enum class MadDrop : std::uint8_t {
    ok,
    wrong_size,     // not exactly 256 bytes
    base_version,   // not 1
    mgmt_class,     // not CM (0x07)
    class_version,  // not 2
    method,         // not Send (0x03)
    count_,
};
inline constexpr std::size_t kMadDrops = static_cast<std::size_t>(MadDrop::count_);
std::string_view mad_drop_name(MadDrop d);

struct MadView {
    MadHeader hdr;
    std::span<const std::uint8_t> data;  // the 232 bytes after the header
};

// Checks the header of a received MAD; fills `out` only when it returns MadDrop::ok.
MadDrop parse_mad(std::span<const std::uint8_t> mad, MadView& out);

// Writes the 24-byte header at the front of `mad`; the data is left as it is.
void write_mad_header(const MadHeader& h, std::span<std::uint8_t, kMadSize> mad);

}  // namespace snic::cm
