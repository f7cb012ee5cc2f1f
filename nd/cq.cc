// libndsnic: completion queues. GetResults turns work completions into the ND_RESULTs the
// requests were posted with; a receive that invalidated a window reports the window's
// invalidate result first (ND v1: on the receiving endpoint's receive CQ, just before the
// receive's). Notify arms the CQ (ibv_req_notify_cq, solicited-only for
// ND_CQ_NOTIFY_SOLICITED); the adapter's event thread completes it.
#include <algorithm>

#include "nd/provider.h"

namespace snic::nd {

CompletionQueue::~CompletionQueue() {
    // libsnic waits for the event thread to acknowledge a notification it took for this CQ:
    // notified() cannot run after this.
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (notify_ != nullptr) finish(notify_, ND_CANCELED);
    adapter->Release();
}

HRESULT CompletionQueue::Resize(SIZE_T n) {
    if (n == 0 || n > static_cast<SIZE_T>(adapter->dev_attr.max_cqe)) return ND_INVALID_PARAMETER_1;
    const int e = ibv_resize_cq(cq, static_cast<int>(n));
    if (e == 0) return ND_SUCCESS;
    // Fewer entries than the CQ holds now, or a size the device does not offer.
    return e == EINVAL ? ND_BUFFER_OVERFLOW : ND_INSUFFICIENT_RESOURCES;
}

HRESULT CompletionQueue::Notify(DWORD type, OVERLAPPED* ov) {
    if (ov == nullptr) return ND_INVALID_PARAMETER_2;
    // Verbs arms a CQ for the next completion or the next solicited (or failed) one; it has
    // no arming for errors alone.
    if (type != ND_CQ_NOTIFY_ANY && type != ND_CQ_NOTIFY_SOLICITED) return ND_NOT_SUPPORTED;
    std::lock_guard lock(mu_);
    if (notify_ != nullptr) return ND_DEVICE_BUSY;  // one request at a time
    start(ov);
    notify_ = ov;
    if (ibv_req_notify_cq(cq, type == ND_CQ_NOTIFY_SOLICITED ? 1 : 0) != 0) {
        notify_ = nullptr;
        finish(ov, ND_UNSUCCESSFUL);
        return ND_UNSUCCESSFUL;
    }
    return ND_PENDING;
}

void CompletionQueue::keep(std::shared_ptr<SlotRing> ring) {
    std::lock_guard lock(mu_);
    kept_.push_back(std::move(ring));
}

void CompletionQueue::notified() {
    std::lock_guard lock(mu_);
    if (notify_ == nullptr) return;
    OVERLAPPED* ov = notify_;
    notify_ = nullptr;
    finish(ov, ND_SUCCESS);
}

HRESULT CompletionQueue::CancelOverlappedRequests() {
    std::lock_guard lock(mu_);
    if (notify_ != nullptr) {
        finish(notify_, ND_CANCELED);
        notify_ = nullptr;
    }
    return ND_SUCCESS;
}

SIZE_T CompletionQueue::GetResults(ND_RESULT* out[], SIZE_T n) {
    if (out == nullptr) return 0;
    SIZE_T done = 0;
    // Results of the last call that did not fit: first.
    for (; held_first_ < held_count_ && done < n; ++held_first_) out[done++] = held_[held_first_];
    if (held_first_ < held_count_) return done;
    held_first_ = held_count_ = 0;
    const auto emit = [&](ND_RESULT* r) {
        if (done < n)
            out[done++] = r;
        else
            held_[held_count_++] = r;
    };
    ibv_wc wc[kBatch];
    while (done < n) {
        const int want = static_cast<int>(std::min<SIZE_T>(n - done, kBatch));
        const int got = ibv_poll_cq(cq, want, wc);
        if (got <= 0) break;
        for (int i = 0; i < got; ++i) {
            auto* s = reinterpret_cast<Slot*>(static_cast<std::uintptr_t>(wc[i].wr_id));
            ND_RESULT* r = s->result;
            const bool ok = wc[i].status == IBV_WC_SUCCESS;
            r->Status = status_of(wc[i].status);
            r->BytesTransferred = !ok ? 0 : s->recv ? wc[i].byte_len : s->length;
            const bool invalidated = s->recv && ok && (wc[i].wc_flags & IBV_WC_WITH_INV) != 0;
            s->ring->retire_through(s);
            if (invalidated) {
                MemoryWindow* mw = adapter->windows.find(wc[i].invalidated_rkey);
                if (mw != nullptr) {
                    mw->invalidate_result->Status = ND_SUCCESS;
                    mw->invalidate_result->BytesTransferred = 0;
                    emit(mw->invalidate_result);
                }
            }
            emit(r);
        }
        if (got < want) break;
    }
    return done;
}

}  // namespace snic::nd
