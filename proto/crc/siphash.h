// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash, the secret behind what
// snic must keep unpredictable to an attacker who sees its outputs (TCP's initial sequence
// numbers and timestamp offsets, IB CM's communication IDs).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace snic {

using SipKey = std::array<std::uint8_t, 16>;

// SipHash-2-4 of `data` under `key` (the 64-bit result of the reference algorithm).
std::uint64_t siphash24(const SipKey& key, std::span<const std::uint8_t> data);

}  // namespace snic
