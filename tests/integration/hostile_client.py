#!/usr/bin/python3
"""A client of libsnic (loaded with ctypes: its rdma_cm and verbs entry points) that does
what test_hostile_users.py's users try, step by step, and holds what it made until its
stdin closes:

    hostile_client.py LIBSNIC STEP...

Each step prints one line, "STEP-NAME N ERRNO": N ids (or objects) it made and the errno of
the call that failed (0: none did); a step stops at its first failure, and the next step
runs all the same.

  bind=IP:PORT[:reuse]       a new id (RDMA_PS_TCP), REUSEADDR set if asked, bound to IP:PORT
  listen                     rdma_listen on the last bound id
  listeners=IP:PORT:N        N new ids, each bound to IP:PORT+i and listening
  connects=SRC:DST:PORT:N    N new ids, each resolved from SRC to DST:PORT and connected
                             (the QP number the application manages: no QP is made); nothing
                             has to answer
  ids=IP:N                   N new ids, each bound to IP (an ephemeral port): the daemon
                             holds an id once it is bound
  pds=CONTEXTS:N             CONTEXTS contexts of the first device (one session each), up to
                             N PDs in each; prints "pds TOTAL ERRNO", the first failure
                             ending the step

The waiting is libsnic's own (rdma_get_cm_event blocks): no step sleeps.
"""

import ctypes
import socket
import struct
import sys

RDMA_PS_TCP = 0x0106
RDMA_OPTION_ID = 0
RDMA_OPTION_ID_REUSEADDR = 1
ADDR_RESOLVED, ROUTE_RESOLVED = 0, 2
RESOLVE_MS = 2000


class SockaddrIn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("addr", ctypes.c_uint32), ("zero", ctypes.c_uint8 * 8)]


class ConnParam(ctypes.Structure):  # struct rdma_conn_param
    _fields_ = [("private_data", ctypes.c_void_p), ("private_data_len", ctypes.c_uint8),
                ("responder_resources", ctypes.c_uint8), ("initiator_depth", ctypes.c_uint8),
                ("flow_control", ctypes.c_uint8), ("retry_count", ctypes.c_uint8),
                ("rnr_retry_count", ctypes.c_uint8), ("srq", ctypes.c_uint8),
                ("qp_num", ctypes.c_uint32)]


class CmEvent(ctypes.Structure):  # the head of struct rdma_cm_event
    _fields_ = [("id", ctypes.c_void_p), ("listen_id", ctypes.c_void_p),
                ("event", ctypes.c_int), ("status", ctypes.c_int)]


def sockaddr(ip: str, port: int) -> SockaddrIn:
    return SockaddrIn(socket.AF_INET, socket.htons(port),
                      struct.unpack("=I", socket.inet_aton(ip))[0])


class Client:
    def __init__(self, libsnic: str):
        self.lib = ctypes.CDLL(libsnic, use_errno=True)
        self.lib.rdma_create_event_channel.restype = ctypes.c_void_p
        self.lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
        self.lib.ibv_open_device.restype = ctypes.c_void_p
        self.lib.ibv_open_device.argtypes = [ctypes.c_void_p]
        self.lib.ibv_alloc_pd.restype = ctypes.c_void_p
        self.lib.ibv_alloc_pd.argtypes = [ctypes.c_void_p]
        for f in ("rdma_create_id", "rdma_set_option", "rdma_bind_addr", "rdma_listen",
                  "rdma_resolve_addr", "rdma_resolve_route", "rdma_connect",
                  "rdma_get_cm_event", "rdma_ack_cm_event"):
            getattr(self.lib, f).argtypes = None
        self.channel = ctypes.c_void_p(self.lib.rdma_create_event_channel())
        assert self.channel, f"rdma_create_event_channel: errno {ctypes.get_errno()}"
        self.held: list = []  # everything made, kept until the process ends
        self.last = None

    def call(self, rc: int) -> int:
        return 0 if rc == 0 else ctypes.get_errno() or -1

    def new_id(self) -> tuple[int, ctypes.c_void_p]:
        cm_id = ctypes.c_void_p()
        err = self.call(self.lib.rdma_create_id(self.channel, ctypes.byref(cm_id), None,
                                                RDMA_PS_TCP))
        if err == 0:
            self.held.append(cm_id)
        return err, cm_id

    def bind(self, cm_id, ip: str, port: int, reuse: bool = False) -> int:
        if reuse:
            one = ctypes.c_int(1)
            err = self.call(self.lib.rdma_set_option(cm_id, RDMA_OPTION_ID,
                                                     RDMA_OPTION_ID_REUSEADDR, ctypes.byref(one),
                                                     ctypes.sizeof(one)))
            if err:
                return err
        addr = sockaddr(ip, port)
        return self.call(self.lib.rdma_bind_addr(cm_id, ctypes.byref(addr)))

    def wait_event(self, cm_id, want: int) -> int:
        """The next event of the channel (the only events are those of the id resolving
        now: connects to nobody are answered by nobody, not within a test's time)."""
        ev = ctypes.POINTER(CmEvent)()
        err = self.call(self.lib.rdma_get_cm_event(self.channel, ctypes.byref(ev)))
        if err:
            return err
        got, status, of = ev.contents.event, ev.contents.status, ev.contents.id
        self.lib.rdma_ack_cm_event(ev)
        if of != cm_id.value:
            raise AssertionError(f"event {got} of another id")
        if got != want or status != 0:
            raise AssertionError(f"event {got} status {status}, {want} expected")
        return 0

    def connect(self, src: str, dst: str, port: int) -> int:
        err, cm_id = self.new_id()
        if err:
            return err
        s, d = sockaddr(src, 0), sockaddr(dst, port)
        err = self.call(self.lib.rdma_resolve_addr(cm_id, ctypes.byref(s), ctypes.byref(d),
                                                   RESOLVE_MS))
        if err == 0:
            err = self.wait_event(cm_id, ADDR_RESOLVED)
        if err == 0:
            err = self.call(self.lib.rdma_resolve_route(cm_id, RESOLVE_MS))
        if err == 0:
            err = self.wait_event(cm_id, ROUTE_RESOLVED)
        if err == 0:
            # The application's own QP (rdma_cm's qp_num): the REQ names it, nobody uses it.
            param = ConnParam(retry_count=7, rnr_retry_count=7, qp_num=0x1234)
            err = self.call(self.lib.rdma_connect(cm_id, ctypes.byref(param)))
        return err

    def pds(self, contexts: int, each: int) -> tuple[int, int]:
        n = ctypes.c_int(0)
        devs = self.lib.ibv_get_device_list(ctypes.byref(n))
        if n.value == 0:
            return 0, ctypes.get_errno() or -1
        total = 0
        for _ in range(contexts):
            ctx = self.lib.ibv_open_device(devs[0])
            if not ctx:
                return total, ctypes.get_errno() or -1
            self.held.append(ctx)
            for _ in range(each):
                pd = self.lib.ibv_alloc_pd(ctx)
                if not pd:
                    return total, ctypes.get_errno() or -1
                self.held.append(pd)
                total += 1
        return total, 0

    def step(self, step: str) -> tuple[str, int, int]:
        name, _, arg = step.partition("=")
        a = arg.split(":") if arg else []
        if name == "bind":
            err, cm_id = self.new_id()
            if err == 0:
                self.last = cm_id
                err = self.bind(cm_id, a[0], int(a[1]), a[2:] == ["reuse"])
            return name, int(err == 0), err
        if name == "listen":
            err = self.call(self.lib.rdma_listen(self.last, 0))
            return name, int(err == 0), err
        if name in ("listeners", "connects", "ids"):
            count = int(a[-1])
            for made in range(count):
                if name == "listeners":
                    err, cm_id = self.new_id()
                    if err == 0:
                        err = self.bind(cm_id, a[0], int(a[1]) + made)
                    if err == 0:
                        err = self.call(self.lib.rdma_listen(cm_id, 0))
                elif name == "connects":
                    err = self.connect(a[0], a[1], int(a[2]))
                else:
                    err, cm_id = self.new_id()
                    if err == 0:
                        err = self.bind(cm_id, a[0], 0)
                if err:
                    return name, made, err
            return name, count, 0
        if name == "pds":
            total, err = self.pds(int(a[0]), int(a[1]))
            return name, total, err
        raise SystemExit(f"unknown step {step!r}")


def main() -> None:
    client = Client(sys.argv[1])
    for step in sys.argv[2:]:
        name, made, err = client.step(step)
        print(f"{name} {made} {err}", flush=True)
    print("holding", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
