// MacAddr, Ipv4Addr and Ipv4Prefix: text forms and prefix arithmetic.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <string>
#include <string_view>

#include "proto/net/addr.h"

namespace snic::net {
namespace {

constexpr Ipv4Addr ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return Ipv4Addr{std::uint32_t{a} << 24 | std::uint32_t{b} << 16 | std::uint32_t{c} << 8 | d};
}

// --- MacAddr -------------------------------------------------------------------------------

TEST(MacAddr, parses_colon_separated_hex) {
    auto m = MacAddr::parse("52:54:00:99:00:02");
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->bytes, (std::array<std::uint8_t, 6>{0x52, 0x54, 0x00, 0x99, 0x00, 0x02}));
}

TEST(MacAddr, parse_is_case_insensitive) {
    auto upper = MacAddr::parse("AA:BB:CC:DD:EE:FF");
    auto lower = MacAddr::parse("aa:bb:cc:dd:ee:ff");
    auto mixed = MacAddr::parse("aA:Bb:cC:dD:Ee:fF");
    ASSERT_TRUE(upper && lower && mixed);
    EXPECT_EQ(*upper, *lower);
    EXPECT_EQ(*mixed, *lower);
    EXPECT_TRUE(upper->is_broadcast() == false);
    EXPECT_EQ(upper->bytes[0], 0xaa);
    EXPECT_EQ(upper->bytes[5], 0xff);
}

TEST(MacAddr, to_string_is_lower_case_two_digits_per_byte) {
    const MacAddr m{{0x02, 0x0a, 0xBC, 0x00, 0x01, 0xff}};
    EXPECT_EQ(m.to_string(), "02:0a:bc:00:01:ff");
    EXPECT_EQ(MacAddr::zero().to_string(), "00:00:00:00:00:00");
    EXPECT_EQ(MacAddr::broadcast().to_string(), "ff:ff:ff:ff:ff:ff");
}

TEST(MacAddr, to_string_round_trips_through_parse) {
    for (unsigned seed = 0; seed < 64; ++seed) {
        MacAddr m{};
        for (std::size_t i = 0; i < 6; ++i)
            m.bytes[i] = static_cast<std::uint8_t>(seed * 37 + i * 91);
        auto back = MacAddr::parse(m.to_string());
        ASSERT_TRUE(back.has_value()) << m.to_string();
        EXPECT_EQ(*back, m);
    }
}

TEST(MacAddr, rejects_malformed_text) {
    for (std::string_view bad : {
             "",
             "01:02:03:04:05",        // five bytes
             "01:02:03:04:05:06:07",  // seven bytes
             "zz:02:03:04:05:06",     // not hex
             "01:02:03:04:05:0g",     // not hex, last byte
             "01:02:03:04:05:06 ",    // trailing garbage
             " 01:02:03:04:05:06",    // leading garbage
             "01:02:03:04:05:06:",    // trailing separator
             "001:02:03:04:05:06",    // three digits
             "01-02-03-04-05-06",     // wrong separator
             "01:02::04:05:06",       // empty byte
             "0x1:02:03:04:05:06",    // prefix
             "-1:02:03:04:05:06",     // sign
             "+1:02:03:04:05:06",     // sign
             "01:02:03:04:05:100",    // byte out of range
             ":::::",
         }) {
        EXPECT_FALSE(MacAddr::parse(bad).has_value()) << "'" << bad << "'";
    }
}

TEST(MacAddr, classifies_broadcast_multicast_zero) {
    EXPECT_TRUE(MacAddr::broadcast().is_broadcast());
    EXPECT_TRUE(MacAddr::broadcast().is_multicast());
    EXPECT_TRUE(MacAddr::zero().is_zero());
    EXPECT_FALSE(MacAddr::zero().is_multicast());
    const MacAddr ipv4_mcast{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}};
    EXPECT_TRUE(ipv4_mcast.is_multicast());
    EXPECT_FALSE(ipv4_mcast.is_broadcast());
    const MacAddr unicast{{0x52, 0x54, 0x00, 0x99, 0x00, 0x02}};
    EXPECT_FALSE(unicast.is_multicast());
    EXPECT_FALSE(unicast.is_zero());
    // The multicast bit is the least significant bit of the first octet only.
    const MacAddr local_admin{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
    EXPECT_FALSE(local_admin.is_multicast());
}

// --- Ipv4Addr ------------------------------------------------------------------------------

TEST(Ipv4Addr, parses_dotted_quad_to_host_order) {
    auto a = Ipv4Addr::parse("192.168.0.1");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->value, 0xc0a80001u);
    EXPECT_EQ(Ipv4Addr::parse("0.0.0.0")->value, 0u);
    EXPECT_EQ(Ipv4Addr::parse("255.255.255.255")->value, 0xffffffffu);
    EXPECT_EQ(Ipv4Addr::parse("10.99.0.2")->value, 0x0a630002u);
}

TEST(Ipv4Addr, to_string_is_dotted_decimal) {
    EXPECT_EQ(ip(10, 99, 0, 2).to_string(), "10.99.0.2");
    EXPECT_EQ(Ipv4Addr{0}.to_string(), "0.0.0.0");
    EXPECT_EQ(Ipv4Addr{0xffffffffu}.to_string(), "255.255.255.255");
}

TEST(Ipv4Addr, to_string_round_trips_through_parse) {
    for (std::uint32_t v : {0u, 1u, 0x7f000001u, 0x0a000001u, 0xc0a800c7u, 0xfffffffeu, 0xffffffffu,
                            0x01020304u, 0x80000000u}) {
        auto back = Ipv4Addr::parse(Ipv4Addr{v}.to_string());
        ASSERT_TRUE(back.has_value()) << v;
        EXPECT_EQ(back->value, v);
    }
}

TEST(Ipv4Addr, rejects_malformed_text) {
    for (std::string_view bad : {
             "",
             "1.2.3",       // three octets
             "1.2.3.4.5",   // five octets
             "256.0.0.1",   // octet out of range
             "1.2.3.256",   // last octet out of range
             "1.2.3.-4",    // sign
             "1.2.3.+4",    // sign
             "-1.2.3.4",    // sign
             "1.2.3.4 ",    // trailing garbage
             " 1.2.3.4",    // leading garbage
             "1.2.3.4x",    // trailing garbage
             "1.2.3.4.",    // trailing dot
             ".1.2.3.4",    // leading dot
             "1..3.4",      // empty octet
             "1.2.3.",      // empty last octet
             "a.b.c.d",     // not decimal
             "0x1.2.3.4",   // hex
             "1.2.3.0004",  // four digits
             "1000.2.3.4",  // four digits
             "1.2.3.4/24",  // a prefix, not an address
             "...",
         }) {
        EXPECT_FALSE(Ipv4Addr::parse(bad).has_value()) << "'" << bad << "'";
    }
}

// --- Ipv4Prefix ----------------------------------------------------------------------------

TEST(Ipv4Prefix, parses_address_and_length) {
    auto p = Ipv4Prefix::parse("10.99.0.2/24");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->addr, ip(10, 99, 0, 2));  // the host part is kept: it is the interface address
    EXPECT_EQ(p->length, 24);
    EXPECT_EQ(p->to_string(), "10.99.0.2/24");
    EXPECT_EQ(Ipv4Prefix::parse("0.0.0.0/0")->length, 0);
    EXPECT_EQ(Ipv4Prefix::parse("1.2.3.4/32")->length, 32);
}

TEST(Ipv4Prefix, rejects_malformed_text) {
    for (std::string_view bad : {
             "",
             "1.2.3.4",       // missing /
             "1.2.3.4/",      // missing length
             "/24",           // missing address
             "1.2.3.4/33",    // length beyond 32
             "1.2.3.4/100",   // length beyond 32
             "1.2.3.4/-1",    // sign
             "1.2.3.4/+8",    // sign
             "1.2.3.4/24 ",   // trailing garbage
             "1.2.3.4/24/8",  // two lengths
             "1.2.3/24",      // bad address
             "256.2.3.4/24",  // bad address
             "1.2.3.4/x",     // not decimal
         }) {
        EXPECT_FALSE(Ipv4Prefix::parse(bad).has_value()) << "'" << bad << "'";
    }
}

TEST(Ipv4Prefix, mask_of_each_length) {
    EXPECT_EQ((Ipv4Prefix{{}, 0}).mask(), 0u);
    EXPECT_EQ((Ipv4Prefix{{}, 1}).mask(), 0x80000000u);
    EXPECT_EQ((Ipv4Prefix{{}, 8}).mask(), 0xff000000u);
    EXPECT_EQ((Ipv4Prefix{{}, 24}).mask(), 0xffffff00u);
    EXPECT_EQ((Ipv4Prefix{{}, 31}).mask(), 0xfffffffeu);
    EXPECT_EQ((Ipv4Prefix{{}, 32}).mask(), 0xffffffffu);
    for (std::uint8_t len = 0; len <= 32; ++len) {
        const std::uint32_t m = Ipv4Prefix{{}, len}.mask();
        EXPECT_EQ(std::popcount(m), len);
        // contiguous leading ones
        EXPECT_EQ(m == 0 ? 0 : std::countl_one(m), len);
    }
}

TEST(Ipv4Prefix, contains_addresses_of_its_subnet_only) {
    const auto p = *Ipv4Prefix::parse("10.99.0.2/24");
    EXPECT_TRUE(p.contains(ip(10, 99, 0, 0)));
    EXPECT_TRUE(p.contains(ip(10, 99, 0, 1)));
    EXPECT_TRUE(p.contains(ip(10, 99, 0, 2)));
    EXPECT_TRUE(p.contains(ip(10, 99, 0, 255)));
    EXPECT_FALSE(p.contains(ip(10, 99, 1, 0)));
    EXPECT_FALSE(p.contains(ip(10, 98, 255, 255)));
    EXPECT_FALSE(p.contains(ip(11, 99, 0, 2)));
}

TEST(Ipv4Prefix, slash_zero_contains_every_address) {
    const Ipv4Prefix p{ip(192, 0, 2, 1), 0};
    for (std::uint32_t v : {0u, 1u, 0x7fffffffu, 0x80000000u, 0xc0000201u, 0xffffffffu}) {
        EXPECT_TRUE(p.contains(Ipv4Addr{v})) << v;
    }
}

TEST(Ipv4Prefix, slash_32_contains_its_address_only) {
    const Ipv4Prefix p{ip(192, 0, 2, 1), 32};
    EXPECT_TRUE(p.contains(ip(192, 0, 2, 1)));
    EXPECT_FALSE(p.contains(ip(192, 0, 2, 0)));
    EXPECT_FALSE(p.contains(ip(192, 0, 2, 2)));
    EXPECT_FALSE(p.contains(ip(64, 0, 2, 1)));  // differs in the top bit only
}

TEST(Ipv4Prefix, slash_31_contains_both_addresses) {
    const Ipv4Prefix p{ip(10, 0, 0, 0), 31};
    EXPECT_TRUE(p.contains(ip(10, 0, 0, 0)));
    EXPECT_TRUE(p.contains(ip(10, 0, 0, 1)));
    EXPECT_FALSE(p.contains(ip(10, 0, 0, 2)));
}

}  // namespace
}  // namespace snic::net
