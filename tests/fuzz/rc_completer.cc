// libFuzzer target: the RC completer (proto/roce/completer.cc) and requester, fed ACKs, NAKs,
// RNR NAKs, READ responses and atomic ACKs (and anything else) while send WRs of every kind
// are in flight, with the invariants of rc_driver.h: READ and atomic results land only in
// the granted local buffers, each send WR completes once and in order, output is well formed.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/rc_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    snic::fuzz::Input in(data, size);
    snic::fuzz::RcDriver d(snic::fuzz::fuzz_config(in));
    d.prime(in);
    d.run(in);
    return 0;
}
