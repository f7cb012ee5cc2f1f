#include "daemon/fault.h"

namespace snic::daemon {

namespace {
std::uint64_t rotl(std::uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}
}  // namespace

FaultRng::FaultRng(std::uint64_t seed) {
    for (auto& s : s_) {  // splitmix64
        seed += 0x9e3779b97f4a7c15ull;
        std::uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        s = z ^ (z >> 31);
    }
}

std::uint64_t FaultRng::next() {  // xoshiro256**
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

FaultAction FaultInjector::decide() {
    FaultAction a;
    a.drop = rng_.chance(rates_.drop);
    if (a.drop) return a;
    a.duplicate = rng_.chance(rates_.duplicate);
    a.reorder = rng_.chance(rates_.reorder);
    a.corrupt = rng_.chance(rates_.corrupt);
    if (a.corrupt) a.corrupt_at = static_cast<std::uint32_t>(rng_.next());
    return a;
}

}  // namespace snic::daemon
