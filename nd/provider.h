// libndsnic: the NetworkDirect v1 objects over libsnic's verbs and rdma_cm, and what the
// library's files share. Which verb each object and call maps to: docs/ND.md.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "include/ndsnic/ndspi.h"

namespace snic::nd {

class Adapter;
class Connector;
class Endpoint;
class Listen;
class MemoryWindow;

// IB CM REQ private data less rdma_cm's header, and the most a REP carries: what a Connect
// and an Accept may pass (Query's MaxCallerData and MaxCalleeData).
inline constexpr SIZE_T kMaxCallerData = 56;
inline constexpr SIZE_T kMaxCalleeData = 196;

// ---- overlapped requests (overlapped.cc) ----

// Marks a request started: Status ND_PENDING.
void start(OVERLAPPED* ov);
// Ends a request: BytesTransferred, then Status, then the caller's eventfd; wakes waiters.
void finish(OVERLAPPED* ov, HRESULT status, SIZE_T bytes = 0);
// INDOverlapped::GetOverlappedResult, the same for every object.
HRESULT overlapped_result(OVERLAPPED* ov, SIZE_T* bytes, BOOL wait);

// ---- reference counting ----

// IUnknown for one interface I (and its bases): QueryInterface answers the IIDs given.
template <class I>
class Counted : public I {
  public:
    ULONG AddRef() override { return ++refs_; }
    ULONG Release() override {
        const ULONG n = --refs_;
        if (n == 0) destroy();
        return n;
    }

  protected:
    virtual void destroy() = 0;
    HRESULT answer(REFIID iid, void** out, std::initializer_list<GUID> mine) {
        if (out == nullptr) return ND_INVALID_PARAMETER;
        for (const GUID& g : mine)
            if (g == iid || iid == IID_IUnknown) {
                AddRef();
                *out = static_cast<I*>(this);
                return ND_SUCCESS;
            }
        *out = nullptr;
        return E_NOINTERFACE;
    }

  private:
    std::atomic<ULONG> refs_{1};
};

// ---- work requests ----

// One posted work request: what its completion reports. wr_id is the slot's address.
class SlotRing;
struct Slot {
    SlotRing* ring = nullptr;
    ND_RESULT* result = nullptr;
    SIZE_T length = 0;
    std::uint32_t seq = 0;
    bool recv = false;
};

// Slots handed out in post order and retired in completion order (a send queue's completion
// retires every earlier, unsignalled request too, as verbs has it). Its size is the depth
// the consumer asked for: a full ring is ND_NO_MORE_ENTRIES.
//
// A CQ may still hold completions of an endpoint released before they were reported (ND
// reports them): the endpoint's rings then stay with its CQs (CompletionQueue::keep) until
// the CQs go, so that a completion's slot is never freed memory.
class SlotRing {
  public:
    SlotRing(std::uint32_t n, bool recv);
    Slot* take();   // nullptr when full
    void untake();  // the last slot taken was not posted after all
    void retire_through(const Slot* s) { head_.store(s->seq + 1, std::memory_order_release); }

  private:
    std::vector<Slot> slots_;
    std::atomic<std::uint32_t> head_{0}, tail_{0};
};

// ---- the objects ----

class Provider final : public Counted<INDProvider> {
  public:
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDProvider});
    }
    HRESULT QueryAddressList(SOCKET_ADDRESS_LIST* list, SIZE_T* size) override;
    HRESULT OpenAdapter(const sockaddr* addr, SIZE_T len, INDAdapter** out) override;

  private:
    void destroy() override { delete this; }
};

// A window the adapter knows by the index part of its key (the bits a rebind keeps), so
// that a receive's invalidated key finds its window without a lock.
class WindowTable {
  public:
    bool put(MemoryWindow* mw, std::uint32_t rkey);
    void remove(MemoryWindow* mw);
    MemoryWindow* find(std::uint32_t rkey) const;

  private:
    static constexpr std::size_t kSlots = 4096;
    std::atomic<MemoryWindow*> slots_[kSlots]{};
    std::atomic<std::uint32_t> keys_[kSlots]{};
};

class Adapter final : public Counted<INDAdapter> {
  public:
    ~Adapter();
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDAdapter, IID_INDOverlapped});
    }
    HRESULT CancelOverlappedRequests() override { return ND_SUCCESS; }
    HRESULT GetOverlappedResult(OVERLAPPED* ov, SIZE_T* bytes, BOOL wait) override {
        return overlapped_result(ov, bytes, wait);
    }
    HANDLE GetFileHandle() override { return -1; }
    HRESULT Query(DWORD version, ND_ADAPTER_INFO* info, SIZE_T* size) override;
    HRESULT Control(DWORD, const void*, SIZE_T, void*, SIZE_T, SIZE_T*, OVERLAPPED*) override {
        return ND_NOT_SUPPORTED;
    }
    HRESULT CreateCompletionQueue(SIZE_T n, INDCompletionQueue** out) override;
    HRESULT RegisterMemory(const void* buf, SIZE_T len, OVERLAPPED* ov, ND_MR_HANDLE* out) override;
    HRESULT DeregisterMemory(ND_MR_HANDLE mr, OVERLAPPED* ov) override;
    HRESULT CreateMemoryWindow(ND_RESULT* invalidate_result, INDMemoryWindow** out) override;
    HRESULT CreateConnector(INDConnector** out) override;
    HRESULT Listen(SIZE_T backlog, INT protocol, USHORT port, USHORT* assigned,
                   INDListen** out) override;

    // Opens the device and starts the event thread; an ND result.
    HRESULT open(ibv_device* dev, const sockaddr_in& addr);
    // Hands an id to the event thread to destroy (mu held): events it already took from the
    // channel may name it until that thread is done with them.
    void retire_id(rdma_cm_id* id);

    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_device_attr dev_attr{};
    ibv_port_attr port_attr{};
    sockaddr_in addr{};
    bool iwarp = false;
    ibv_comp_channel* channel = nullptr;  // every CQ's notifications
    rdma_event_channel* cm_channel = nullptr;
    WindowTable windows;
    std::recursive_mutex mu;               // the connection objects and ids
    std::vector<class Listen*> listeners;  // mu held; their ids carry no context

  private:
    void destroy() override { delete this; }
    void events_loop();
    void handle_cm_event(rdma_cm_event* e);
    void handle_async_event(const ibv_async_event& e);
    void handle_cq_event();

    int wake_fd_ = -1;
    std::atomic<bool> stopping_{false};
    std::vector<rdma_cm_id*> retired_ids_;
    std::thread events_thread_;
};

class CompletionQueue final : public Counted<INDCompletionQueue> {
  public:
    explicit CompletionQueue(Adapter* a) : adapter(a) { adapter->AddRef(); }
    ~CompletionQueue();
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDCompletionQueue, IID_INDOverlapped});
    }
    HRESULT CancelOverlappedRequests() override;
    HRESULT GetOverlappedResult(OVERLAPPED* ov, SIZE_T* bytes, BOOL wait) override {
        return overlapped_result(ov, bytes, wait);
    }
    HRESULT Resize(SIZE_T n) override;
    HRESULT Notify(DWORD type, OVERLAPPED* ov) override;
    SIZE_T GetResults(ND_RESULT* results[], SIZE_T n) override;

    // The CQ's notification arrived (the adapter's event thread).
    void notified();
    // Keeps a released endpoint's ring until the CQ goes.
    void keep(std::shared_ptr<SlotRing> ring);

    Adapter* adapter;
    ibv_cq* cq = nullptr;

  private:
    void destroy() override { delete this; }

    static constexpr int kBatch = 16;  // completions polled at a time

    std::mutex mu_;  // the pending notification
    OVERLAPPED* notify_ = nullptr;
    std::vector<std::shared_ptr<SlotRing>> kept_;
    // Results polled that did not fit the caller's array (a receive behind its invalidate's).
    ND_RESULT* held_[2 * kBatch]{};
    int held_first_ = 0, held_count_ = 0;
};

class MemoryWindow final : public Counted<INDMemoryWindow> {
  public:
    MemoryWindow(Adapter* a, ND_RESULT* r) : adapter(a), invalidate_result(r) { a->AddRef(); }
    ~MemoryWindow();
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDMemoryWindow});
    }

    Adapter* adapter;
    ND_RESULT* invalidate_result;  // reported on the receive CQ when a peer invalidates it
    ibv_mw* mw = nullptr;
    std::uint32_t rkey = 0;  // the key of the current (or last) binding

  private:
    void destroy() override { delete this; }
};

class Endpoint final : public Counted<INDEndpoint> {
  public:
    Endpoint(Adapter* a, Connector* c);
    ~Endpoint();
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDEndpoint});
    }
    HRESULT Flush() override;
    void StartRequestBatch() override {}
    void SubmitRequestBatch() override {}
    HRESULT Send(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, DWORD flags) override;
    HRESULT SendAndInvalidate(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, const ND_MW_DESCRIPTOR* mw,
                              DWORD flags) override;
    HRESULT Receive(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n) override;
    HRESULT Bind(ND_RESULT* r, ND_MR_HANDLE mr, INDMemoryWindow* mw, const void* buf, SIZE_T len,
                 DWORD flags, ND_MW_DESCRIPTOR* out) override;
    HRESULT Invalidate(ND_RESULT* r, INDMemoryWindow* mw, DWORD flags) override;
    HRESULT Read(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, const ND_MW_DESCRIPTOR* mw,
                 ULONGLONG offset, DWORD flags) override;
    HRESULT Write(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, const ND_MW_DESCRIPTOR* mw,
                  ULONGLONG offset, DWORD flags) override;

    // Makes the QP (in INIT, so that receives can be posted before the connection).
    HRESULT create(CompletionQueue* in, CompletionQueue* out, SIZE_T n_in, SIZE_T n_out,
                   SIZE_T sge_in, SIZE_T sge_out, SIZE_T read_in, SIZE_T read_out);
    // QP to RTR and RTS from what rdma_cm agreed for `id` (RoCE; iWARP's CM moves it).
    int move_qp(rdma_cm_id* id);
    void to_error();

    Adapter* adapter;
    Connector* connector;  // not counted: the connector owns the endpoint's connection
    CompletionQueue* in_cq = nullptr;
    CompletionQueue* out_cq = nullptr;
    ibv_qp* qp = nullptr;
    std::uint32_t max_sge_in = 0, max_sge_out = 0;
    std::uint32_t read_in = 0, read_out = 0;
    std::atomic<bool> connected{false};  // read by every post

  private:
    void destroy() override { delete this; }
    HRESULT post_send(ibv_send_wr& wr, ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, DWORD flags);

    std::shared_ptr<SlotRing> sq_, rq_;
};

// A connection request as a listener keeps it: the new id and what the requester sent.
struct Request {
    rdma_cm_id* id = nullptr;
    std::uint8_t data[kMaxCallerData]{};
    SIZE_T len = 0;
    SIZE_T read_in = 0;   // RDMA Reads the requester takes from us
    SIZE_T read_out = 0;  // RDMA Reads the requester lets us have outstanding
};

enum class ConnState { idle, requested, connecting, responded, accepting, connected, closed };

class Connector final : public Counted<INDConnector> {
  public:
    explicit Connector(Adapter* a) : adapter(a) { a->AddRef(); }
    ~Connector();
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDConnector, IID_INDOverlapped});
    }
    HRESULT CancelOverlappedRequests() override;
    HRESULT GetOverlappedResult(OVERLAPPED* ov, SIZE_T* bytes, BOOL wait) override {
        return overlapped_result(ov, bytes, wait);
    }
    HRESULT CreateEndpoint(INDCompletionQueue* in, INDCompletionQueue* out, SIZE_T n_in,
                           SIZE_T n_out, SIZE_T sge_in, SIZE_T sge_out, SIZE_T read_in,
                           SIZE_T read_out, SIZE_T* max_inline, INDEndpoint** ep) override;
    HRESULT Connect(INDEndpoint* ep, const sockaddr* addr, SIZE_T len, INT protocol,
                    USHORT local_port, const void* data, SIZE_T data_len, OVERLAPPED* ov) override;
    HRESULT CompleteConnect(OVERLAPPED* ov) override;
    HRESULT Accept(INDEndpoint* ep, const void* data, SIZE_T len, OVERLAPPED* ov) override;
    HRESULT Reject(const void* data, SIZE_T len) override;
    HRESULT GetConnectionData(SIZE_T* read_in, SIZE_T* read_out, void* data, SIZE_T* len) override;
    HRESULT GetLocalAddress(sockaddr* addr, SIZE_T* len) override;
    HRESULT GetPeerAddress(sockaddr* addr, SIZE_T* len) override;
    HRESULT NotifyDisconnect(OVERLAPPED* ov) override;
    HRESULT Disconnect(OVERLAPPED* ov) override;

    // A connection request handed over by a listener (adapter->mu held).
    void take_request(const Request& r);
    // Whether the connector has no connection, made or under way (adapter->mu held).
    bool idle() const { return state_ == ConnState::idle && id_ == nullptr; }
    // An rdma_cm event for this connector's id (adapter->mu held).
    void handle(rdma_cm_event* e);
    // The QP failed: the connection ends (adapter->mu held).
    void qp_failed();

    Adapter* adapter;
    Endpoint* ep = nullptr;  // counted while set

  private:
    void destroy() override { delete this; }
    void keep_peer_data(const rdma_conn_param& c);
    void ended(HRESULT why);

    ConnState state_ = ConnState::idle;
    rdma_cm_id* id_ = nullptr;
    OVERLAPPED* connect_ov_ = nullptr;
    OVERLAPPED* accept_ov_ = nullptr;
    OVERLAPPED* disconnect_ov_ = nullptr;
    std::uint8_t out_data_[kMaxCallerData]{};  // the Connect's private data
    SIZE_T out_len_ = 0;
    std::uint8_t peer_data_[kMaxCalleeData]{};
    SIZE_T peer_len_ = 0;
    SIZE_T peer_read_in_ = 0, peer_read_out_ = 0;  // as the peer stated them
    bool established_ = false;
};

class Listen final : public Counted<INDListen> {
  public:
    explicit Listen(Adapter* a) : adapter(a) { a->AddRef(); }
    ~Listen();
    HRESULT QueryInterface(REFIID iid, void** out) override {
        return answer(iid, out, {IID_INDListen, IID_INDOverlapped});
    }
    HRESULT CancelOverlappedRequests() override;
    HRESULT GetOverlappedResult(OVERLAPPED* ov, SIZE_T* bytes, BOOL wait) override {
        return overlapped_result(ov, bytes, wait);
    }
    HRESULT GetConnectionRequest(INDConnector* c, OVERLAPPED* ov) override;

    HRESULT open(SIZE_T backlog, USHORT port, USHORT* assigned);
    const rdma_cm_id* id() const { return id_; }
    // A connection request arrived (adapter->mu held): its id and private data are kept
    // until a GetConnectionRequest takes them.
    void request(rdma_cm_event* e);

    Adapter* adapter;

  private:
    void destroy() override { delete this; }
    struct Waiter {
        Connector* connector;
        OVERLAPPED* ov;
    };

    rdma_cm_id* id_ = nullptr;
    std::deque<Request> requests_;
    std::deque<Waiter> waiters_;
};

// The ND status of a work completion's verbs status (status.cc; a table).
HRESULT status_of(ibv_wc_status s);

}  // namespace snic::nd
