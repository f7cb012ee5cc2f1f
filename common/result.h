// Result<T>: a value or an error (errno-style code plus a message) for setup paths.
// The datapath does not use it; it returns verdicts and counts.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace snic {

struct Error {
    int code = 0;         // errno-style (EINVAL, ENODEV, ...)
    std::string message;  // one line, meant for a human
};

template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : v_(std::move(value)) {}
    Result(Error err) : v_(std::move(err)) {}

    bool ok() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return ok(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    const Error& error() const { return std::get<1>(v_); }

  private:
    std::variant<T, Error> v_;
};

// Result<void>: success or an error.
struct Ok {};
using Status = Result<Ok>;

inline Error make_error(int code, std::string message) {
    return Error{code, std::move(message)};
}

}  // namespace snic
