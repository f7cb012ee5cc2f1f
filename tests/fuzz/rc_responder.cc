// libFuzzer target: the RC responder (proto/roce/responder.cc), UC's (uc.cc, when the input
// makes the QP a UC one) and everything a request packet reaches, fed request and response
// packets (built from chosen fields or raw), receive WRs and time, with the invariants of
// rc_driver.h: no write outside what the fake memory granted, completions of outstanding WRs
// only and within their buffers, well-formed output (from a UC QP, UC requests only).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/rc_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    snic::fuzz::Input in(data, size);
    snic::fuzz::RcDriver d(snic::fuzz::fuzz_config(in));
    d.run(in);
    return 0;
}
