#include "daemon/port/arp_cache.h"

#include <bit>

namespace snic::daemon {

ArpCache::ArpCache(std::size_t capacity, std::uint64_t lifetime, std::uint64_t retry)
    : entries_(std::bit_ceil(capacity < kProbe ? kProbe : capacity)),
      mask_(entries_.size() - 1),
      lifetime_(lifetime),
      retry_(retry) {}

std::size_t ArpCache::slot(std::uint32_t ip) const {
    // Fibonacci hashing spreads consecutive addresses of one subnet.
    return static_cast<std::size_t>((ip * 0x9e3779b1u) >> 8) & mask_;
}

const ArpCache::Entry* ArpCache::find(std::uint32_t ip) const {
    for (std::size_t i = 0; i < kProbe; ++i) {
        const Entry& e = entries_[(slot(ip) + i) & mask_];
        if (e.state != State::free && e.ip == ip) return &e;
    }
    return nullptr;
}

// The entry for ip: its own, else a free one, else the one in the probe window
// that expires first (an expired or pending entry goes before a valid one).
ArpCache::Entry& ArpCache::claim(std::uint32_t ip, std::uint64_t now) {
    if (Entry* e = find(ip)) return *e;
    // How long an entry is still worth keeping: 0 for free, pending or expired ones.
    auto worth = [now](const Entry& e) {
        return e.state == State::valid && e.expires > now ? e.expires : 0;
    };
    Entry* victim = &entries_[slot(ip)];
    for (std::size_t i = 0; i < kProbe && victim->state != State::free; ++i) {
        Entry& e = entries_[(slot(ip) + i) & mask_];
        if (e.state == State::free || worth(e) < worth(*victim)) victim = &e;
    }
    *victim = Entry{};
    victim->ip = ip;
    ++generation_;
    return *victim;
}

std::optional<net::MacAddr> ArpCache::lookup(net::Ipv4Addr ip, std::uint64_t now) const {
    const auto r = lookup_until(ip, now);
    return r ? std::optional(r->mac) : std::nullopt;
}

std::optional<ArpCache::Resolved> ArpCache::lookup_until(net::Ipv4Addr ip,
                                                         std::uint64_t now) const {
    const Entry* e = find(ip.value);
    if (e == nullptr || e->state != State::valid || e->expires <= now) return std::nullopt;
    return Resolved{e->mac, e->expires};
}

std::optional<net::MacAddr> ArpCache::last_known(net::Ipv4Addr ip) const {
    const Entry* e = find(ip.value);
    if (e == nullptr || e->mac.is_zero()) return std::nullopt;
    return e->mac;
}

void ArpCache::learn(net::Ipv4Addr ip, net::MacAddr mac, std::uint64_t now) {
    Entry& e = claim(ip.value, now);
    if (e.mac != mac) ++generation_;
    e.state = State::valid;
    e.mac = mac;
    e.expires = now + lifetime_;
}

bool ArpCache::refresh(net::Ipv4Addr ip, net::MacAddr mac, std::uint64_t now) {
    Entry* found = find(ip.value);
    if (found == nullptr) return false;
    Entry& e = *found;
    if (e.mac != mac) ++generation_;
    e.state = State::valid;
    e.mac = mac;
    e.expires = now + lifetime_;
    return true;
}

bool ArpCache::should_request(net::Ipv4Addr ip, std::uint64_t now) {
    if (lookup(ip, now)) return false;
    Entry& e = claim(ip.value, now);
    if (e.requested && now - e.last_request < retry_) return false;
    e.state = State::pending;  // new, or expired
    e.requested = true;
    e.last_request = now;
    return true;
}

std::size_t ArpCache::valid_entries(std::uint64_t now) const {
    std::size_t n = 0;
    for (const Entry& e : entries_) n += e.state == State::valid && e.expires > now;
    return n;
}

}  // namespace snic::daemon
