// The project's pseudo-random generator: xoshiro256** seeded through splitmix64. Small,
// fast, and the same sequence on every machine for a seed, so that a fault schedule or a
// stress run can be replayed from the seed it printed. Not for anything secret.
#pragma once

#include <cstdint>

namespace snic {

// splitmix64's finaliser: a 64-bit mix with every input bit reaching every output bit.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

class Xoshiro256 {
  public:
    explicit Xoshiro256(std::uint64_t seed) noexcept {
        for (auto& s : s_) {  // splitmix64
            seed += 0x9e3779b97f4a7c15ull;
            s = mix64(seed);
        }
    }

    std::uint64_t next() noexcept {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    // Uniform in [0, n) (0 for n == 0; the modulo's bias is negligible for small n).
    std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
    // Uniform in [0, 1), 53 bits.
    double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    // True with probability p; draws nothing when p <= 0.
    bool chance(double p) noexcept { return p > 0 && unit() < p; }

  private:
    static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
        return (x << k) | (x >> (64 - k));
    }
    std::uint64_t s_[4];
};

}  // namespace snic
