// The control connection to one snicd: one SOCK_SEQPACKET socket, request and
// reply (shm/control_abi.h), fds passed with SCM_RIGHTS. Serialised by one mutex:
// each ibv_context has its own connection, so contexts never wait on each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>

#include "libclient/util.h"
#include "shm/control_abi.h"

namespace snic::client {

class Conn {
  public:
    // Connects to the daemon's socket; 0 or an errno.
    int connect(const std::string& path, int timeout_ms);
    void close() { fd_.reset(); }
    bool connected() const { return static_cast<bool>(fd_); }
    const std::string& path() const { return path_; }
    // Whether snicd has hung up this connection (it exited or was killed): one poll(2),
    // never blocking.
    bool hung_up() const;

    // One request/reply. Returns 0 or an errno: the daemon's status, or the
    // transport's (EIO: the daemon went away or answered nonsense; ETIMEDOUT).
    // The reply body is written only when the status is 0.
    template <class Req, class Rep>
    int call(shm::CtrlOp op, const Req& req, Rep* reply, std::span<const int> fds = {}) {
        static_assert(std::is_trivially_copyable_v<Req> && std::is_trivially_copyable_v<Rep>);
        constexpr std::size_t req_len = std::is_same_v<Req, shm::Empty> ? 0 : sizeof(Req);
        constexpr std::size_t rep_len = std::is_same_v<Rep, shm::Empty> ? 0 : sizeof(Rep);
        return call_raw(op, &req, req_len, reply, rep_len, fds);
    }

    // A request naming one object, with no reply body (dealloc/destroy ops).
    int call_handle(shm::CtrlOp op, shm::Handle h) {
        shm::Empty none;
        return call(op, shm::HandleReq{h, 0}, &none);
    }

    // The status request on a fresh connection (device discovery).
    int status(shm::StatusReply* out);

  private:
    int call_raw(shm::CtrlOp op, const void* req, std::size_t req_len, void* reply,
                 std::size_t reply_len, std::span<const int> fds);
    int exchange_locked(shm::CtrlOp op, const void* req, std::size_t req_len, void* reply,
                        std::size_t reply_len, std::span<const int> fds, std::size_t* got);
    // The request numbered `seq`, with its fds; 0 or an errno.
    int send_locked(shm::CtrlOp op, std::uint32_t seq, const void* req, std::size_t req_len,
                    std::span<const int> fds);
    // The reply to request `seq`, within the timeout: its body (`whole`: the datagram, header
    // included) into `reply`, its length in `got`; 0 or an errno.
    int reply_locked(std::uint32_t seq, bool whole, void* reply, std::size_t reply_len,
                     std::size_t* got);

    Fd fd_;
    std::mutex mu_;
    std::uint32_t seq_ = 0;
    std::string path_;
    int timeout_ms_ = 10000;
    bool abi_reported_ = false;
};

}  // namespace snic::client
