#include "daemon/resources.h"

#include <algorithm>
#include <cassert>
#include <stdexcept>

namespace snic::daemon {

namespace {

// Bits of the slot index in a name of `f`.
constexpr unsigned index_bits(NameFormat f) {
    return f.index_shift == 0 ? f.gen_shift : 32 - f.index_shift;
}

}  // namespace

NameTable::NameTable(std::uint32_t slots, NameFormat format)
    : nslots_(slots), format_(format), slots_(new Slot[slots]), free_(slots) {
    if (slots == 0 || (index_bits(format) < 32 && slots > (std::uint32_t{1} << index_bits(format))))
        throw std::invalid_argument("NameTable: slot count does not fit the name format");
    for (std::uint32_t i = 0; i < slots; ++i) free_[i] = i;
    free_count_ = slots;
}

std::uint32_t NameTable::make(std::uint32_t index, std::uint32_t gen) const {
    return (index << format_.index_shift) | (gen << format_.gen_shift);
}

std::uint32_t NameTable::index_of(std::uint32_t name) const {
    const unsigned bits = index_bits(format_);
    const std::uint32_t mask = bits >= 32 ? ~0u : (std::uint32_t{1} << bits) - 1;
    return (name >> format_.index_shift) & mask;
}

std::uint32_t NameTable::acquire(const void* obj, std::uint8_t kind) {
    if (free_count_ == 0) return 0;
    const std::uint32_t index = free_[free_head_];
    free_head_ = (free_head_ + 1) % nslots_;
    --free_count_;
    Slot& s = slots_[index];
    const std::uint32_t max_gen = (std::uint32_t{1} << format_.gen_bits) - 1;
    s.gen = s.gen >= max_gen ? 1 : s.gen + 1;
    s.obj.store(obj, std::memory_order_relaxed);
    s.kind.store(kind, std::memory_order_relaxed);
    const std::uint32_t name = make(index, s.gen);
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

// The slot `name` points at, or nullptr when the name has bits outside its format.
const NameTable::Slot* NameTable::slot_of(std::uint32_t name) const {
    const std::uint32_t index = index_of(name);
    if (index >= nslots_ || make(index, 0) != (name & ~make(0, (1u << format_.gen_bits) - 1)))
        return nullptr;
    return &slots_[index];
}

const void* NameTable::lookup(std::uint32_t name, std::uint8_t kind) const {
    const Slot* s = name == 0 ? nullptr : slot_of(name);
    if (s == nullptr || s->name.load(std::memory_order_acquire) != name) return nullptr;
    if (s->kind.load(std::memory_order_relaxed) != kind) return nullptr;
    return s->obj.load(std::memory_order_relaxed);
}

const void* NameTable::lookup_slot(std::uint32_t name, std::uint8_t kind) const {
    const Slot* s = slot_of(name);
    if (s == nullptr || s->name.load(std::memory_order_acquire) == 0) return nullptr;
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

Resources::Resources(const Limits& limits)
    : limits_(limits),
      keys_(limits.of(shm::ObjKind::mr).per_daemon + limits.of(shm::ObjKind::mw).per_daemon,
            kKeyFormat),
      qpns_(limits.of(shm::ObjKind::qp).per_daemon, kQpnFormat),
      srqns_(limits.of(shm::ObjKind::srq).per_daemon, kSrqnFormat) {}

bool Resources::reserve(shm::ObjKind k, Counts& session) {
    const auto i = static_cast<std::size_t>(k);
    const KindLimit l = limits_.objects[i];
    if (session[i] >= l.per_client || counts_[i] >= l.per_daemon) return false;
    ++session[i];
    ++counts_[i];
    return true;
}

void Resources::release(shm::ObjKind k, Counts& session) {
    const auto i = static_cast<std::size_t>(k);
    assert(session[i] > 0 && counts_[i] > 0);
    --session[i];
    --counts_[i];
}

std::uint32_t Resources::add_session(Session* s) {
    sessions_.push_back(s);
    return next_session_++;
}

void Resources::remove_session(Session* s) {
    std::erase(sessions_, s);
}

}  // namespace snic::daemon
