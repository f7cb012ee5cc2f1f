#include "proto/cm/mad.h"

#include "proto/cm/wire.h"

namespace snic::cm {

namespace {

// The header's fields at their IBA offsets, as (byte, bit from the MSB, width).
constexpr Field kBaseVersion{0, 0, 8};
constexpr Field kMgmtClass{1, 0, 8};
constexpr Field kClassVersion{2, 0, 8};
constexpr Field kMethod{3, 0, 8};  // the R (response) bit is bit 0 of byte 3; CM never sets it
constexpr Field kStatus{4, 0, 16};
constexpr Field kClassSpecific{6, 0, 16};
constexpr Field kTid{8, 0, 64};
constexpr Field kAttrId{16, 0, 16};
constexpr Field kAttrMod{20, 0, 32};

constexpr std::array<std::string_view, kMadDrops> kDropNames = {
    "ok", "wrong_size", "base_version", "mgmt_class", "class_version", "method",
};

}  // namespace

std::string_view mad_drop_name(MadDrop d) {
    auto i = static_cast<std::size_t>(d);
    return i < kDropNames.size() ? kDropNames[i] : "?";
}

MadDrop parse_mad(std::span<const std::uint8_t> mad, MadView& out) {
    if (mad.size() != kMadSize) return MadDrop::wrong_size;
    MadHeader h;
    h.base_version = static_cast<std::uint8_t>(get_field(mad, kBaseVersion));
    h.mgmt_class = static_cast<std::uint8_t>(get_field(mad, kMgmtClass));
    h.class_version = static_cast<std::uint8_t>(get_field(mad, kClassVersion));
    h.method = static_cast<std::uint8_t>(get_field(mad, kMethod));
    if (h.base_version != kMadBaseVersion) return MadDrop::base_version;
    if (h.mgmt_class != kMgmtClassCm) return MadDrop::mgmt_class;
    if (h.class_version != kCmClassVersion) return MadDrop::class_version;
    if (h.method != kMethodSend) return MadDrop::method;
    h.status = static_cast<std::uint16_t>(get_field(mad, kStatus));
    h.class_specific = static_cast<std::uint16_t>(get_field(mad, kClassSpecific));
    h.tid = get_field(mad, kTid);
    h.attr_id = static_cast<std::uint16_t>(get_field(mad, kAttrId));
    h.attr_mod = static_cast<std::uint32_t>(get_field(mad, kAttrMod));
    out.hdr = h;
    out.data = mad.subspan(kMadHeaderSize);
    return MadDrop::ok;
}

void write_mad_header(const MadHeader& h, std::span<std::uint8_t, kMadSize> mad) {
    set_field(mad, kBaseVersion, h.base_version);
    set_field(mad, kMgmtClass, h.mgmt_class);
    set_field(mad, kClassVersion, h.class_version);
    set_field(mad, kMethod, h.method);
    set_field(mad, kStatus, h.status);
    set_field(mad, kClassSpecific, h.class_specific);
    set_field(mad, kTid, h.tid);
    set_field(mad, kAttrId, h.attr_id);
    mad[18] = 0;
    mad[19] = 0;
    set_field(mad, kAttrMod, h.attr_mod);
}

}  // namespace snic::cm
