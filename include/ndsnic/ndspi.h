// libndsnic: a NetworkDirect-shaped service provider interface (version 1) on Linux, over
// snic's verbs and rdma_cm (libsnic). Installed as <ndsnic/ndspi.h>; C++ only.
//
// The interfaces, result codes and structure layouts are NetworkDirect's (ND v1: INDProvider,
// INDAdapter, INDCompletionQueue, INDEndpoint, INDConnector, INDListen, INDMemoryWindow and
// their INDOverlapped base). What Windows supplies and Linux lacks is defined here: the
// integer types, GUID and IUnknown, SOCKET_ADDRESS_LIST, and OVERLAPPED, which is a structure
// of this library's own (ND_OVERLAPPED, below). docs/ND.md lists every adaptation.
#ifndef NDSNIC_NDSPI_H
#define NDSNIC_NDSPI_H

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

// ---- Windows' integer types, as Linux types ------------------------------------------------

typedef std::int32_t HRESULT;
typedef std::size_t SIZE_T;
typedef std::uint64_t UINT64;
typedef std::uint32_t UINT32;
typedef std::uint16_t UINT16;
typedef std::uint8_t UINT8;
typedef std::uint32_t DWORD;
typedef std::uint32_t ULONG;
typedef std::uint64_t ULONGLONG;
typedef std::uint16_t USHORT;
typedef std::int32_t INT;
typedef std::int32_t LONG;
typedef std::int32_t BOOL;
typedef int HANDLE;  // a file descriptor
typedef void VOID;

#ifndef TRUE
#define TRUE 1
#endif
#ifndef FALSE
#define FALSE 0
#endif

#define SUCCEEDED(hr) (static_cast<HRESULT>(hr) >= 0)
#define FAILED(hr) (static_cast<HRESULT>(hr) < 0)

// ---- result codes: NetworkDirect's values (severity, facility System, NTSTATUS code) ------

#define ND_SUCCESS ((HRESULT)0x00000000L)
#define ND_TIMEOUT ((HRESULT)0x00000102L)
#define ND_PENDING ((HRESULT)0x00000103L)
#define ND_BUFFER_OVERFLOW ((HRESULT)0x80000005L)
#define ND_DEVICE_BUSY ((HRESULT)0x80000011L)
#define ND_NO_MORE_ENTRIES ((HRESULT)0x8000001AL)
#define ND_UNSUCCESSFUL ((HRESULT)0xC0000001L)
#define ND_ACCESS_VIOLATION ((HRESULT)0xC0000005L)
#define ND_INVALID_HANDLE ((HRESULT)0xC0000008L)
#define ND_INVALID_PARAMETER ((HRESULT)0xC000000DL)
#define ND_INVALID_DEVICE_REQUEST ((HRESULT)0xC0000010L)
#define ND_NO_MEMORY ((HRESULT)0xC0000017L)
#define ND_INVALID_PARAMETER_MIX ((HRESULT)0xC0000030L)
#define ND_DATA_OVERRUN ((HRESULT)0xC000003CL)
#define ND_SHARING_VIOLATION ((HRESULT)0xC0000043L)
#define ND_INSUFFICIENT_RESOURCES ((HRESULT)0xC000009AL)
#define ND_DEVICE_NOT_READY ((HRESULT)0xC00000A3L)
#define ND_IO_TIMEOUT ((HRESULT)0xC00000B5L)
#define ND_NOT_SUPPORTED ((HRESULT)0xC00000BBL)
#define ND_INTERNAL_ERROR ((HRESULT)0xC00000E5L)
#define ND_INVALID_PARAMETER_1 ((HRESULT)0xC00000EFL)
#define ND_INVALID_PARAMETER_2 ((HRESULT)0xC00000F0L)
#define ND_INVALID_PARAMETER_3 ((HRESULT)0xC00000F1L)
#define ND_INVALID_PARAMETER_4 ((HRESULT)0xC00000F2L)
#define ND_INVALID_PARAMETER_5 ((HRESULT)0xC00000F3L)
#define ND_INVALID_PARAMETER_6 ((HRESULT)0xC00000F4L)
#define ND_INVALID_PARAMETER_7 ((HRESULT)0xC00000F5L)
#define ND_INVALID_PARAMETER_8 ((HRESULT)0xC00000F6L)
#define ND_INVALID_PARAMETER_9 ((HRESULT)0xC00000F7L)
#define ND_INVALID_PARAMETER_10 ((HRESULT)0xC00000F8L)
#define ND_CANCELED ((HRESULT)0xC0000120L)
#define ND_REMOTE_ERROR ((HRESULT)0xC000013DL)
#define ND_INVALID_ADDRESS ((HRESULT)0xC0000141L)
#define ND_INVALID_DEVICE_STATE ((HRESULT)0xC0000184L)
#define ND_INVALID_BUFFER_SIZE ((HRESULT)0xC0000206L)
#define ND_TOO_MANY_ADDRESSES ((HRESULT)0xC0000209L)
#define ND_ADDRESS_ALREADY_EXISTS ((HRESULT)0xC000020AL)
#define ND_CONNECTION_REFUSED ((HRESULT)0xC0000236L)
#define ND_CONNECTION_INVALID ((HRESULT)0xC000023AL)
#define ND_CONNECTION_ACTIVE ((HRESULT)0xC000023BL)
#define ND_NETWORK_UNREACHABLE ((HRESULT)0xC000023CL)
#define ND_HOST_UNREACHABLE ((HRESULT)0xC000023DL)
#define ND_CONNECTION_ABORTED ((HRESULT)0xC0000241L)
#define ND_DEVICE_REMOVED ((HRESULT)0xC00002B6L)
#define E_NOTIMPL ((HRESULT)0x80004001L)
#define E_NOINTERFACE ((HRESULT)0x80004002L)

// ---- COM's identity and lifetime, reduced to what the interfaces need ----------------------

struct GUID {
    UINT32 Data1;
    UINT16 Data2;
    UINT16 Data3;
    UINT8 Data4[8];
};
typedef const GUID& REFIID;

inline bool operator==(const GUID& a, const GUID& b) {
    if (a.Data1 != b.Data1 || a.Data2 != b.Data2 || a.Data3 != b.Data3) return false;
    for (int i = 0; i < 8; ++i)
        if (a.Data4[i] != b.Data4[i]) return false;
    return true;
}

// The interface identifiers NetworkDirect v1 gives its interfaces.
inline constexpr GUID IID_IUnknown = {
    0x00000000, 0x0000, 0x0000, {0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x46}};
inline constexpr GUID IID_INDOverlapped = {
    0xc859e15e, 0x75e2, 0x4fe3, {0x8d, 0x6d, 0x0d, 0xff, 0x36, 0xf0, 0x24, 0x42}};
inline constexpr GUID IID_INDCompletionQueue = {
    0x1245a633, 0x2a32, 0x473a, {0x83, 0x0c, 0xe0, 0x5d, 0x1f, 0x86, 0x9d, 0x02}};
inline constexpr GUID IID_INDMemoryWindow = {
    0x070fe1f5, 0x0ab5, 0x4361, {0x88, 0xdb, 0x97, 0x4b, 0xa7, 0x04, 0xd4, 0xb9}};
inline constexpr GUID IID_INDEndpoint = {
    0xdbd00eab, 0xb679, 0x44a9, {0xbd, 0x65, 0xe8, 0x2f, 0x3d, 0xe1, 0x2d, 0x1a}};
inline constexpr GUID IID_INDConnector = {
    0x1bcaf2d1, 0xe274, 0x4aeb, {0xac, 0x57, 0xcd, 0x5d, 0x43, 0x76, 0xe0, 0xb7}};
inline constexpr GUID IID_INDListen = {
    0xbb902588, 0xba3f, 0x4441, {0x9f, 0xe1, 0x3b, 0x67, 0x95, 0xe4, 0xe6, 0x68}};
inline constexpr GUID IID_INDAdapter = {
    0xa023c5a0, 0x5b73, 0x43bc, {0x8d, 0x20, 0x33, 0xaa, 0x07, 0xe9, 0x51, 0x0f}};
inline constexpr GUID IID_INDProvider = {
    0x0c5dd316, 0x5fdf, 0x47e6, {0xb2, 0xd0, 0x2a, 0x6e, 0xda, 0x8d, 0x39, 0xdd}};

// Reference counted: an object lives until its last Release.
struct IUnknown {
    virtual HRESULT QueryInterface(REFIID riid, void** ppvObj) = 0;
    virtual ULONG AddRef() = 0;
    virtual ULONG Release() = 0;

  protected:
    ~IUnknown() = default;
};

// ---- the structures NetworkDirect v1 defines -------------------------------------------------

// A registered memory region, as RegisterMemory hands it out.
typedef struct ND_MR_HANDLE__* ND_MR_HANDLE;

typedef struct _ND_ADAPTER_INFO1 {
    UINT32 VendorId;
    UINT32 DeviceId;
    SIZE_T MaxInboundSge;
    SIZE_T MaxInboundRequests;
    SIZE_T MaxInboundLength;
    SIZE_T MaxOutboundSge;
    SIZE_T MaxOutboundRequests;
    SIZE_T MaxOutboundLength;
    SIZE_T MaxInlineData;
    SIZE_T MaxInboundReadLimit;
    SIZE_T MaxOutboundReadLimit;
    SIZE_T MaxCqEntries;
    SIZE_T MaxRegistrationSize;
    SIZE_T MaxWindowSize;
    SIZE_T LargeRequestThreshold;
    SIZE_T MaxCallerData;
    SIZE_T MaxCalleeData;
} ND_ADAPTER_INFO1;
typedef ND_ADAPTER_INFO1 ND_ADAPTER_INFO;

// A request's result. The caller's ND_RESULT is the request's identity: GetResults returns
// the pointer the request was posted with, its Status and BytesTransferred filled in.
typedef struct _ND_RESULT {
    HRESULT Status;
    SIZE_T BytesTransferred;
} ND_RESULT;

// What a peer needs to reach a bound window. Every field in network byte order.
#pragma pack(push, 1)
typedef struct _ND_MW_DESCRIPTOR {
    UINT64 Base;
    UINT64 Length;
    UINT32 Token;
} ND_MW_DESCRIPTOR;
#pragma pack(pop)

typedef struct _ND_SGE {
    VOID* pAddr;
    SIZE_T Length;
    ND_MR_HANDLE hMr;
} ND_SGE;

// Winsock's address list, for INDProvider::QueryAddressList.
typedef struct _SOCKET_ADDRESS {
    struct sockaddr* lpSockaddr;
    INT iSockaddrLength;
} SOCKET_ADDRESS;

typedef struct _SOCKET_ADDRESS_LIST {
    INT iAddressCount;
    SOCKET_ADDRESS Address[1];
} SOCKET_ADDRESS_LIST;

// ---- OVERLAPPED: this library's own -------------------------------------------------------
//
// Linux has no OVERLAPPED. An asynchronous call (RegisterMemory, DeregisterMemory, Connect,
// CompleteConnect, Accept, GetConnectionRequest, Notify, NotifyDisconnect, Disconnect) takes
// an ND_OVERLAPPED that stays the caller's and must live until the request completes. The
// call sets Status to ND_PENDING; the request's end stores BytesTransferred, then its result
// in Status, and then, if EventFd > 0, adds 1 to that eventfd (a descriptor the caller made
// with eventfd(2) and may poll). After Status changed the library touches the structure no
// more. GetOverlappedResult reads it, waiting for the change when asked to.
typedef struct _ND_OVERLAPPED {
    volatile HRESULT Status;  // ND_PENDING while in progress, then the request's result
    SIZE_T BytesTransferred;
    int EventFd;    // > 0: an eventfd told of the completion; 0 or -1: none
    void* Context;  // the caller's; never read or written by the library
} ND_OVERLAPPED;
typedef ND_OVERLAPPED OVERLAPPED;

// ---- the interfaces -------------------------------------------------------------------------

struct INDOverlapped : IUnknown {
    // Completes every pending overlapped request of the object with ND_CANCELED.
    virtual HRESULT CancelOverlappedRequests() = 0;
    // The request's result (ND_PENDING while in progress unless bWait) and its byte count.
    virtual HRESULT GetOverlappedResult(OVERLAPPED* pOverlapped, SIZE_T* pNumberOfBytesTransferred,
                                        BOOL bWait) = 0;

  protected:
    ~INDOverlapped() = default;
};

#define ND_CQ_NOTIFY_ERRORS 0
#define ND_CQ_NOTIFY_ANY 1
#define ND_CQ_NOTIFY_SOLICITED 2

struct INDCompletionQueue : INDOverlapped {
    virtual HRESULT Resize(SIZE_T nEntries) = 0;
    // Completes pOverlapped when the next result (ND_CQ_NOTIFY_ANY) or the next solicited or
    // failed result (ND_CQ_NOTIFY_SOLICITED) arrives.
    virtual HRESULT Notify(DWORD Type, OVERLAPPED* pOverlapped) = 0;
    // Up to nResults results, oldest first; the number returned.
    virtual SIZE_T GetResults(ND_RESULT* pResults[], SIZE_T nResults) = 0;

  protected:
    ~INDCompletionQueue() = default;
};

struct INDMemoryWindow : IUnknown {
  protected:
    ~INDMemoryWindow() = default;
};

#define ND_OP_FLAG_SILENT_SUCCESS 0x00000001
#define ND_OP_FLAG_READ_FENCE 0x00000002
#define ND_OP_FLAG_SEND_AND_SOLICIT_EVENT 0x00000004
#define ND_OP_FLAG_ALLOW_READ 0x00000008
#define ND_OP_FLAG_ALLOW_WRITE 0x00000010

struct INDEndpoint : IUnknown {
    virtual HRESULT Flush() = 0;
    virtual void StartRequestBatch() = 0;
    virtual void SubmitRequestBatch() = 0;
    virtual HRESULT Send(ND_RESULT* pResult, const ND_SGE* pSgl, SIZE_T nSge, DWORD Flags) = 0;
    virtual HRESULT SendAndInvalidate(ND_RESULT* pResult, const ND_SGE* pSgl, SIZE_T nSge,
                                      const ND_MW_DESCRIPTOR* pRemoteMwDescriptor, DWORD Flags) = 0;
    virtual HRESULT Receive(ND_RESULT* pResult, const ND_SGE* pSgl, SIZE_T nSge) = 0;
    virtual HRESULT Bind(ND_RESULT* pResult, ND_MR_HANDLE hMr, INDMemoryWindow* pMw,
                         const void* pBuffer, SIZE_T BufferSize, DWORD Flags,
                         ND_MW_DESCRIPTOR* pMwDescriptor) = 0;
    virtual HRESULT Invalidate(ND_RESULT* pResult, INDMemoryWindow* pMw, DWORD Flags) = 0;
    virtual HRESULT Read(ND_RESULT* pResult, const ND_SGE* pSgl, SIZE_T nSge,
                         const ND_MW_DESCRIPTOR* pRemoteMwDescriptor, ULONGLONG Offset,
                         DWORD Flags) = 0;
    virtual HRESULT Write(ND_RESULT* pResult, const ND_SGE* pSgl, SIZE_T nSge,
                          const ND_MW_DESCRIPTOR* pRemoteMwDescriptor, ULONGLONG Offset,
                          DWORD Flags) = 0;

  protected:
    ~INDEndpoint() = default;
};

struct INDConnector : INDOverlapped {
    virtual HRESULT CreateEndpoint(INDCompletionQueue* pInboundCq, INDCompletionQueue* pOutboundCq,
                                   SIZE_T nInboundEntries, SIZE_T nOutboundEntries,
                                   SIZE_T nInboundSge, SIZE_T nOutboundSge, SIZE_T InboundReadLimit,
                                   SIZE_T OutboundReadLimit, SIZE_T* pMaxInlineData,
                                   INDEndpoint** ppEndpoint) = 0;
    virtual HRESULT Connect(INDEndpoint* pEndpoint, const struct sockaddr* pAddress,
                            SIZE_T AddressLength, INT Protocol, USHORT LocalPort,
                            const void* pPrivateData, SIZE_T PrivateDataLength,
                            OVERLAPPED* pOverlapped) = 0;
    virtual HRESULT CompleteConnect(OVERLAPPED* pOverlapped) = 0;
    virtual HRESULT Accept(INDEndpoint* pEndpoint, const void* pPrivateData,
                           SIZE_T PrivateDataLength, OVERLAPPED* pOverlapped) = 0;
    virtual HRESULT Reject(const void* pPrivateData, SIZE_T PrivateDataLength) = 0;
    virtual HRESULT GetConnectionData(SIZE_T* pInboundReadLimit, SIZE_T* pOutboundReadLimit,
                                      void* pPrivateData, SIZE_T* pPrivateDataLength) = 0;
    virtual HRESULT GetLocalAddress(struct sockaddr* pAddress, SIZE_T* pAddressLength) = 0;
    virtual HRESULT GetPeerAddress(struct sockaddr* pAddress, SIZE_T* pAddressLength) = 0;
    virtual HRESULT NotifyDisconnect(OVERLAPPED* pOverlapped) = 0;
    virtual HRESULT Disconnect(OVERLAPPED* pOverlapped) = 0;

  protected:
    ~INDConnector() = default;
};

struct INDListen : INDOverlapped {
    virtual HRESULT GetConnectionRequest(INDConnector* pConnector, OVERLAPPED* pOverlapped) = 0;

  protected:
    ~INDListen() = default;
};

struct INDAdapter : INDOverlapped {
    virtual HANDLE GetFileHandle() = 0;
    virtual HRESULT Query(DWORD VersionRequested, ND_ADAPTER_INFO* pInfo, SIZE_T* pBufferSize) = 0;
    virtual HRESULT Control(DWORD IoControlCode, const void* pInBuffer, SIZE_T InBufferSize,
                            void* pOutBuffer, SIZE_T OutBufferSize, SIZE_T* pBytesReturned,
                            OVERLAPPED* pOverlapped) = 0;
    virtual HRESULT CreateCompletionQueue(SIZE_T nEntries, INDCompletionQueue** ppCq) = 0;
    virtual HRESULT RegisterMemory(const void* pBuffer, SIZE_T BufferSize, OVERLAPPED* pOverlapped,
                                   ND_MR_HANDLE* phMr) = 0;
    virtual HRESULT DeregisterMemory(ND_MR_HANDLE hMr, OVERLAPPED* pOverlapped) = 0;
    virtual HRESULT CreateMemoryWindow(ND_RESULT* pInvalidateResult, INDMemoryWindow** ppMw) = 0;
    virtual HRESULT CreateConnector(INDConnector** ppConnector) = 0;
    virtual HRESULT Listen(SIZE_T Backlog, INT Protocol, USHORT Port, USHORT* pAssignedPort,
                           INDListen** ppListen) = 0;

  protected:
    ~INDAdapter() = default;
};

struct INDProvider : IUnknown {
    virtual HRESULT QueryAddressList(SOCKET_ADDRESS_LIST* pAddressList, SIZE_T* pBufferSize) = 0;
    virtual HRESULT OpenAdapter(const struct sockaddr* pAddress, SIZE_T AddressLength,
                                INDAdapter** ppAdapter) = 0;

  protected:
    ~INDProvider() = default;
};

// The provider: libndsnic's one entry point (where Windows' loader would ask the provider's
// DLL for its class object). *ppProvider holds one reference.
extern "C" HRESULT NdSnicOpenProvider(INDProvider** ppProvider);

#endif  // NDSNIC_NDSPI_H
