#include "daemon/port/fault.h"

namespace snic::daemon {

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
