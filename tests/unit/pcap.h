// Reading the wire captures of tests/vectors in unit tests: where they are, and a reader of
// classic pcap files (libpcap's format: a 24-byte global header, then per packet a 16-byte
// record header and the bytes; either byte order, micro- or nanosecond timestamps; link
// type 1, Ethernet, only). A capture that cannot be read is a failure, never a skip.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifndef SNIC_TEST_VECTORS
#define SNIC_TEST_VECTORS "tests/vectors"
#endif

namespace snic::test {

// $SNIC_TEST_VECTORS, else the directory compiled in as SNIC_TEST_VECTORS.
inline std::string vectors_dir() {
    const char* env = std::getenv("SNIC_TEST_VECTORS");
    return env != nullptr && *env != '\0' ? env : SNIC_TEST_VECTORS;
}

inline std::string vector_path(const char* name) {
    return vectors_dir() + "/" + name;
}

struct Pcap {
    std::vector<std::vector<std::uint8_t>> frames;  // each whole Ethernet frame, in file order
};

inline std::uint32_t pcap_load32(const std::uint8_t* p, bool swapped) {
    const std::uint32_t le = std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 |
                             std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
    return swapped ? __builtin_bswap32(le) : le;
}

// Reads every frame of the capture at `path` into `out`; fails on a frame cut by the
// snap length, since every byte of every frame is checked.
inline ::testing::AssertionResult read_pcap(const std::string& path, Pcap& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return ::testing::AssertionFailure()
               << "cannot open " << path << " (set SNIC_TEST_VECTORS to the vectors directory)";
    }
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
    if (bytes.size() < 24) return ::testing::AssertionFailure() << path << ": no global header";
    const std::uint32_t magic = pcap_load32(bytes.data(), false);
    bool swapped = false;
    if (magic == 0xa1b2c3d4 || magic == 0xa1b23c4d) {
        swapped = false;
    } else if (magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1) {
        swapped = true;
    } else {
        return ::testing::AssertionFailure() << path << ": not a classic pcap file";
    }
    const std::uint32_t linktype = pcap_load32(bytes.data() + 20, swapped) & 0x0fffffff;
    if (linktype != 1) return ::testing::AssertionFailure() << path << ": link type " << linktype;
    std::size_t at = 24;
    while (at < bytes.size()) {
        if (bytes.size() - at < 16) return ::testing::AssertionFailure() << path << ": cut record";
        const std::uint32_t incl = pcap_load32(bytes.data() + at + 8, swapped);
        const std::uint32_t orig = pcap_load32(bytes.data() + at + 12, swapped);
        at += 16;
        if (bytes.size() - at < incl) return ::testing::AssertionFailure() << path << ": cut frame";
        if (incl != orig) {
            return ::testing::AssertionFailure()
                   << path << ": frame " << out.frames.size() + 1 << " was truncated by snaplen";
        }
        out.frames.emplace_back(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                bytes.begin() + static_cast<std::ptrdiff_t>(at + incl));
        at += incl;
    }
    return ::testing::AssertionSuccess();
}

}  // namespace snic::test
