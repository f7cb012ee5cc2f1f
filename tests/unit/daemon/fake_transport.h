// A transport for the unit tests of the daemon's sessions (daemon/verbs/transport.h): it starts
// engines that do only what a test tells them, through the glue every transport shares
// (daemon/verbs/qp_glue.h), records what the session asks of it and runs "lcore" work inline.
#pragma once

#include <infiniband/verbs.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/verbs/qp_glue.h"
#include "daemon/verbs/session.h"
#include "daemon/verbs/transport.h"

namespace snic::daemon::fixture {

// An engine that does only what a test tells it: the glue's state, and the view and counters
// a test sets for operators to see.
class FakeEngine final : public QpEngine {
  public:
    FakeEngine(Qp& qp, const NameTable& keys) : glue(qp, keys) {}
    // Failed by the glue (told to, or by its own error completion) or by the test's view.
    bool failed() const override { return glue.failed() || shown.failed; }
    QpEngineView view() const override {
        QpEngineView v = shown;
        v.failed = failed();
        return v;
    }
    void for_each_counter(void (*fn)(void*, NamedCounter), void* ctx) const override {
        for (const NamedCounter& c : counters) fn(ctx, c);
    }
    QpGlue glue;
    QpEngineView shown;  // what view() shows
    std::vector<NamedCounter> counters;
};

// A transport that records what the session asks of it and runs "lcore" work inline. Its
// own attribute rule: path MTU 512 is refused.
class FakeTransport final : public Transport {
  public:
    explicit FakeTransport(const NameTable& keys, std::string_view name = "fake")
        : keys_(keys), name_(name) {}

    std::string_view name() const override { return name_; }
    void run(const std::function<void()>& fn) override {
        ++runs;
        fn();
    }
    const char* check_attr(std::uint32_t mask, const shm::QpAttr& a) const override {
        return (mask & IBV_QP_PATH_MTU) != 0 && a.path_mtu == IBV_MTU_512 ? "no 512 here" : nullptr;
    }
    Result<std::unique_ptr<QpEngine>> start(Qp& qp) override {
        calls.push_back("start");
        started_with = qp.attr.iw_conn;
        if (refuse_start) return make_error(EINVAL, "no such connection");
        auto e = std::make_unique<FakeEngine>(qp, keys_);
        engine = e.get();
        return std::unique_ptr<QpEngine>(std::move(e));
    }
    void start_sending(Qp&) override {
        calls.push_back("start_sending");
        engine->glue.set_sending();
    }
    void drain(Qp& qp) override {
        calls.push_back("drain");
        engine->glue.set_draining(qp.attr.en_sqd_async_notify != 0);
        engine->glue.note_held(held);
    }
    void resume(Qp&) override {
        calls.push_back("resume");
        engine->glue.set_sending();
    }
    void to_error(Qp&) override {
        calls.push_back("to_error");
        engine->glue.note_failed(true);
    }
    void stop(std::span<Qp* const> qps) override {
        calls.push_back(qps.size() == 1 ? "stop" : "stop " + std::to_string(qps.size()));
        engine = nullptr;
    }
    void for_each_counter(void (*)(void*, NamedCounter), void*) const override {}
    bool poll(std::uint64_t) override { return false; }

    std::vector<std::string> calls;
    int runs = 0;
    std::uint32_t held = 0;  // send WRs the fake engine holds
    FakeEngine* engine = nullptr;
    bool refuse_start = false;       // start() fails (an iWARP binding refused)
    std::uint32_t started_with = 0;  // QpAttr::iw_conn at the last start()

  private:
    const NameTable& keys_;
    std::string_view name_;
};

}  // namespace snic::daemon::fixture
