// What `snicctl qp` prints of the sessions' QPs (shm/control_abi.h's qps and qp ops), and the
// paging of its listing; apart from the socket so that unit tests read it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shm/control_abi.h"

namespace snic::snicctl {

// A QP number as a user gives it: decimal, or hexadecimal after 0x (as the verbs tools print
// it); nullopt unless it is a whole 24-bit number.
std::optional<std::uint32_t> parse_qpn(std::string_view text);

// One QP of the listing, on one line of "key value" pairs:
//   qpn N device D session N pid N uid N type T state S dest_qpn N peer IP
std::string qp_line(const shm::QpSummary& q);

// One QP in full: qp_line(), then its attributes, its engine's view and its counters (the
// non-zero ones unless `all`), each line "key value" pairs.
std::string qp_dump(const shm::QpReply& q, bool all);

// Every QP of a listing, asking page after page (`page(first_qpn)`: the reply from that QP
// number on, nullopt when the request failed). nullopt when a request failed or a reply is
// malformed (more listed than fit, QP numbers out of order, no progress).
using QpsPager = std::function<std::optional<shm::QpsReply>(std::uint32_t first_qpn)>;
std::optional<std::vector<shm::QpSummary>> fetch_qps(const QpsPager& page);

// One line of `snicctl tcp` for a row of port `port_id`: a listener
//   port N LISTEN local IP:PORT backlog N queued N
// or a connection
//   port N STATE local IP:PORT remote IP:PORT mss N cwnd N ssthresh N srtt US rttvar US rto US
//   retransmits N fast N timeouts N bytes_sent N bytes_acked N bytes_received N segs_out N
//   segs_in N [sack] [ts] [recovery]
std::string tcp_line(std::uint32_t port_id, const shm::TcpConnInfo& c);

}  // namespace snic::snicctl
