// A port's ARP cache: IPv4 -> MAC with expiry, and the pacing of requests for
// addresses being resolved. Fixed capacity, no allocation after construction,
// owned by the port's lcore. Time is whatever tick the caller counts in.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "proto/net/addr.h"

namespace snic::daemon {

// What one sender that talks to one peer keeps of the peer's MAC (Port::resolve): good while
// the clock is short of `until` and the cache's generation is still `generation`.
struct MacMemo {
    net::MacAddr mac{};
    std::uint64_t until = 0;
    std::uint64_t generation = 0;
};

class ArpCache {
  public:
    // `lifetime`: how long a learnt entry stays valid; `retry`: the least interval
    // between two requests for the same address. Capacity is rounded up to a power of two.
    ArpCache(std::size_t capacity, std::uint64_t lifetime, std::uint64_t retry);

    // The MAC of `ip` if known and not expired.
    std::optional<net::MacAddr> lookup(net::Ipv4Addr ip, std::uint64_t now) const;

    // The same with the time it expires, for a caller that keeps it (see generation()).
    struct Resolved {
        net::MacAddr mac;
        std::uint64_t expires;
    };
    std::optional<Resolved> lookup_until(net::Ipv4Addr ip, std::uint64_t now) const;

    // Changes whenever an entry's MAC changes or an entry is taken for another address:
    // a MAC looked up is still the cache's answer while this and the clock are short of
    // its expiry. (A refresh that only extends an entry leaves it alone.)
    std::uint64_t generation() const { return generation_; }

    // The MAC `ip` last had, expired or not (nullopt if it never resolved): what to keep
    // sending to while it is being resolved again, as a stale neighbour entry is used.
    std::optional<net::MacAddr> last_known(net::Ipv4Addr ip) const;

    // Records ip -> mac (from a reply, or a request addressed to us).
    void learn(net::Ipv4Addr ip, net::MacAddr mac, std::uint64_t now);

    // Updates ip -> mac only if ip is already cached (RFC 826's merge of other traffic).
    bool refresh(net::Ipv4Addr ip, net::MacAddr mac, std::uint64_t now);

    // True when a request for `ip` should go out now: it is not resolved, and no request
    // went out within `retry`. Records the request.
    bool should_request(net::Ipv4Addr ip, std::uint64_t now);

    std::size_t valid_entries(std::uint64_t now) const;

  private:
    enum class State : std::uint8_t { free, pending, valid };
    struct Entry {
        std::uint32_t ip = 0;
        State state = State::free;
        net::MacAddr mac{};
        std::uint64_t expires = 0;  // valid: until when
        bool requested = false;     // a request went out, at last_request
        std::uint64_t last_request = 0;
    };
    static constexpr std::size_t kProbe = 8;  // entries searched per lookup

    std::size_t slot(std::uint32_t ip) const;
    const Entry* find(std::uint32_t ip) const;
    Entry* find(std::uint32_t ip) {
        return const_cast<Entry*>(std::as_const(*this).find(ip));  // one lookup for both
    }
    Entry& claim(std::uint32_t ip, std::uint64_t now);

    std::vector<Entry> entries_;
    std::size_t mask_;
    std::uint64_t lifetime_;
    std::uint64_t retry_;
    std::uint64_t generation_ = 0;
};

}  // namespace snic::daemon
