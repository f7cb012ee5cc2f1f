#include "daemon/verbs/resources.h"

#include <sys/random.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <spdlog/fmt/fmt.h>

namespace snic::daemon {

namespace {

// Bits of the slot field in a name of `f`.
constexpr unsigned field_bits(NameFormat f) {
    return f.index_shift == 0 ? f.gen_shift : 32 - f.index_shift;
}

constexpr std::uint32_t low_mask(unsigned bits) {
    return bits >= 32 ? ~0u : (std::uint32_t{1} << bits) - 1;
}

// One step of splitmix64: small, and every output bit depends on every state bit. Not a
// cryptographic generator: a forger sees a few bits of a few outputs, never the state.
std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The seed of table `n` of one Resources: tables seeded alike would name alike.
std::uint64_t table_seed(std::uint64_t seed, unsigned n) {
    std::uint64_t out = 0;
    for (unsigned i = 0; i <= n; ++i) out = splitmix64(seed);
    return out;
}

}  // namespace

std::uint64_t random_seed() {
    std::uint64_t seed = 0;
    auto* p = reinterpret_cast<unsigned char*>(&seed);
    for (std::size_t got = 0; got < sizeof seed;) {
        const ssize_t n = ::getrandom(p + got, sizeof seed - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
        got += static_cast<std::size_t>(n);
    }
    return seed;
}

NameTable::NameTable(std::uint32_t slots, NameFormat format, std::uint64_t seed)
    : nslots_(slots),
      format_(format),
      index_bits_(slots == 0 ? 0 : static_cast<unsigned>(std::bit_width(slots - 1))),
      index_mask_(low_mask(index_bits_)),
      tag_mask_(low_mask(field_bits(format)) & ~index_mask_),
      gen_mask_(low_mask(format.gen_bits)),
      name_mask_((low_mask(field_bits(format)) << format.index_shift) |
                 (gen_mask_ << format.gen_shift)),
      random_(seed),
      slots_(new Slot[slots]),
      free_(slots) {
    if (slots == 0 || index_bits_ > field_bits(format) || format.gen_bits == 0)
        throw std::invalid_argument("NameTable: slot count does not fit the name format");
    // The first names: the slots in a shuffled order (Fisher-Yates), each at a random
    // generation (the one before the first it hands out).
    for (std::uint32_t i = 0; i < slots; ++i) free_[i] = i;
    for (std::uint32_t i = slots - 1; i > 0; --i)
        std::swap(free_[i], free_[static_cast<std::uint32_t>(next_random() % (i + 1))]);
    for (std::uint32_t i = 0; i < slots; ++i)
        slots_[i].gen = static_cast<std::uint32_t>(next_random() % gen_mask_);
    free_count_ = slots;
}

std::uint64_t NameTable::next_random() {
    return splitmix64(random_);
}

// `tag`: bits of the slot field above the index, already in place.
std::uint32_t NameTable::make(std::uint32_t index, std::uint32_t tag, std::uint32_t gen) const {
    return ((tag | index) << format_.index_shift) | (gen << format_.gen_shift);
}

std::uint32_t NameTable::acquire(const void* obj, std::uint8_t kind) {
    if (free_count_ == 0) return 0;
    const std::uint32_t index = free_[free_head_];
    free_head_ = (free_head_ + 1) % nslots_;
    --free_count_;
    Slot& s = slots_[index];
    s.gen = s.gen >= gen_mask_ ? 1 : s.gen + 1;
    s.obj.store(obj, std::memory_order_relaxed);
    s.kind.store(kind, std::memory_order_relaxed);
    const auto tag = static_cast<std::uint32_t>(next_random()) & tag_mask_;
    std::uint32_t name = make(index, tag, s.gen);
    if (name == name_mask_) {  // all ones (the last generation): skip to the first
        s.gen = 1;
        name = make(index, tag, s.gen);
    }
    s.name.store(name, std::memory_order_release);
    ++live_;
    return name;
}

void NameTable::release(std::uint32_t name) {
    const std::uint32_t index = index_of(name);
    assert(index < nslots_ && slots_[index].name.load(std::memory_order_relaxed) == name);
    if (index >= nslots_) return;
    Slot& s = slots_[index];
    if (s.name.load(std::memory_order_relaxed) != name) return;
    s.name.store(0, std::memory_order_release);
    s.obj.store(nullptr, std::memory_order_relaxed);
    free_[(free_head_ + free_count_) % nslots_] = index;
    ++free_count_;
    --live_;
}

// Whatever the generation, the rest of the name (the slot field: index and tag) must be
// the live name's.
const void* NameTable::lookup_slot(std::uint32_t name, std::uint8_t kind) const {
    const Slot* s = slot_of(name);
    if (s == nullptr) return nullptr;
    const std::uint32_t live = s->name.load(std::memory_order_acquire);
    const std::uint32_t gen_field = gen_mask_ << format_.gen_shift;
    if (live == 0 || (live & ~gen_field) != (name & ~gen_field)) return nullptr;
    if (s->kind.load(std::memory_order_relaxed) != kind) return nullptr;
    return s->obj.load(std::memory_order_relaxed);
}

NameLease& NameLease::operator=(NameLease&& o) noexcept {
    if (this != &o) {
        if (table_ != nullptr && name_ != 0) table_->release(name_);
        table_ = std::exchange(o.table_, nullptr);
        name_ = std::exchange(o.name_, 0);
    }
    return *this;
}

NameLease::~NameLease() {
    if (table_ != nullptr && name_ != 0) table_->release(name_);
}

Resources::Resources(const Limits& limits, std::uint64_t seed)
    : limits_(limits),
      keys_(limits.of(shm::ObjKind::mr).per_daemon + limits.of(shm::ObjKind::mw).per_daemon,
            kKeyFormat, table_seed(seed, 0)),
      qpns_(limits.of(shm::ObjKind::qp).per_daemon, kQpnFormat, table_seed(seed, 1)),
      srqns_(limits.of(shm::ObjKind::srq).per_daemon, kSrqnFormat, table_seed(seed, 2)) {}

bool Resources::reserve(shm::ObjKind k, Counts& session, std::uint32_t uid) {
    const auto i = static_cast<std::size_t>(k);
    const KindLimit l = limits_.objects[i];
    if (session[i] >= l.per_client || counts_[i] >= l.per_daemon) return false;
    if (uid != 0 &&
        (count_of_uid(k, uid) >= l.per_uid() || counts_[i] >= l.per_daemon - l.root_reserve()))
        return false;
    ++session[i];
    ++counts_[i];
    ++counts_by_uid_[uid][i];
    return true;
}

void Resources::release(shm::ObjKind k, Counts& session, std::uint32_t uid) {
    const auto i = static_cast<std::size_t>(k);
    assert(session[i] > 0 && counts_[i] > 0);
    --session[i];
    --counts_[i];
    const auto it = counts_by_uid_.find(uid);
    assert(it != counts_by_uid_.end() && it->second[i] > 0);
    if (it == counts_by_uid_.end()) return;
    --it->second[i];
    if (it->second == Counts{}) counts_by_uid_.erase(it);
}

std::uint32_t Resources::count_of_uid(shm::ObjKind k, std::uint32_t uid) const {
    const auto it = counts_by_uid_.find(uid);
    return it == counts_by_uid_.end() ? 0 : it->second[static_cast<std::size_t>(k)];
}

Result<KeptFd> Resources::keep_fd(Fd fd, std::uint32_t uid, std::uint32_t& client) {
    const std::uint32_t of_uid = fds_of_uid(uid);
    if (client >= limits_.max_fds_per_client)
        return make_error(EMFILE, fmt::format("this client keeps {} descriptors, its quota is {}",
                                              client, limits_.max_fds_per_client));
    if (of_uid >= limits_.max_fds_per_uid)
        return make_error(EMFILE,
                          fmt::format("uid {} keeps {} descriptors over its clients, its quota is "
                                      "{} (this client keeps {})",
                                      uid, of_uid, limits_.max_fds_per_uid, client));
    ++client;
    ++fds_by_uid_[uid];
    return KeptFd(ClientFd(std::move(fd)), *this, uid, client);
}

std::uint32_t Resources::fds_of_uid(std::uint32_t uid) const {
    const auto it = fds_by_uid_.find(uid);
    return it == fds_by_uid_.end() ? 0 : it->second;
}

void Resources::release_fd(std::uint32_t uid, std::uint32_t& client) {
    const auto it = fds_by_uid_.find(uid);
    assert(client > 0 && it != fds_by_uid_.end() && it->second > 0);
    --client;
    if (--it->second == 0) fds_by_uid_.erase(it);
}

KeptFd& KeptFd::operator=(KeptFd&& o) noexcept {
    if (this != &o) {
        release();
        fd_ = std::move(o.fd_);
        r_ = std::exchange(o.r_, nullptr);
        uid_ = o.uid_;
        client_ = std::exchange(o.client_, nullptr);
    }
    return *this;
}

void KeptFd::release() {
    fd_ = ClientFd{};  // closed first: counted while it is open
    if (r_ != nullptr) r_->release_fd(uid_, *client_);
    r_ = nullptr;
    client_ = nullptr;
}

std::uint32_t Resources::add_session(Session* s) {
    sessions_.push_back(s);
    return next_session_++;
}

void Resources::remove_session(Session* s) {
    std::erase(sessions_, s);
}

}  // namespace snic::daemon
