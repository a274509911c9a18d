"""kvcheck's own read-only listener for an agent's metadata and region confirmations
(NIXL's listener protocol: an 8-byte little-endian length, then the message), served
from one thread so that clients holding connections cannot lock probes out.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from kvcheck.errors import InputError


class _MetadataServer:
    """A read-only server of NIXL's listener protocol bound to one address.

    Answers ``NIXLCOMM:SEND`` with ``NIXLCOMM:LOAD`` + blob and ``KVCHECK:CONFIRM`` +
    16-byte nonce with ``KVCHECK:REGIONS`` + ``confirm(nonce)`` as JSON; ignores every
    other command (peers cannot push or invalidate metadata). Requests over 64 KiB close
    the connection.

    One thread serves every connection (``selectors``, non-blocking sockets), so holding
    connections open costs a client sockets, not the agent's threads: a connection must
    send its first request within ``FIRST_BYTE_S`` and finish each within
    ``REQUEST_S``, and lives at most ``CONN_DEADLINE_S``; one peer address holds at most
    ``PER_PEER`` connections, all peers ``MAX_CLIENTS``; when full, a new connection
    evicts the oldest connection that has not completed a request (a probe's own
    connection completes within milliseconds), so idle or trickling clients cannot
    lock probes out. The listen backlog is ``BACKLOG``. ``on_request()`` is called on
    every confirmation request.
    """

    MAX_CLIENTS = 256
    PER_PEER = 64
    BACKLOG = 128
    FIRST_BYTE_S = 2.0
    REQUEST_S = 5.0
    CONN_DEADLINE_S = 10.0

    def __init__(self, host: str, port: int, blob: bytes, confirm=None, on_request=None):
        self.blob = blob
        self.confirm = confirm
        self.on_request = on_request
        try:
            self.sock = socket.create_server((host, port), reuse_port=False, backlog=self.BACKLOG)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc}", field="--listen") from None
        self.host, self.port = self.sock.getsockname()[:2]
        self.sock.setblocking(False)
        self._stop = threading.Event()
        self._conns: dict[socket.socket, dict] = {}
        self._thread = threading.Thread(target=self._run, name="kvcheck-nixl-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    # -- the loop -------------------------------------------------------------------

    def _run(self) -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, None)
        self._sel = sel
        try:
            while not self._stop.is_set():
                for key, mask in sel.select(timeout=0.2):
                    if key.data is None:
                        self._accept()
                    else:
                        self._service(key.fileobj, mask)
                self._expire(time.monotonic())
        finally:
            for conn in list(self._conns):
                self._drop(conn)
            sel.close()

    def _accept(self) -> None:
        import selectors

        for _ in range(64):  # drain the backlog in bursts
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            peer = addr[0] if isinstance(addr, tuple) else str(addr)
            now = time.monotonic()
            same = [c for c, st in self._conns.items() if st["peer"] == peer]
            if len(same) >= self.PER_PEER:
                self._evict(same)
            if len(self._conns) >= self.MAX_CLIENTS:
                self._evict(list(self._conns))
            conn.setblocking(False)
            self._conns[conn] = {
                "peer": peer,
                "start": now,
                "inbuf": bytearray(),
                "out": bytearray(),
                "served": 0,
                "request_by": now + self.FIRST_BYTE_S,
                "end": now + self.CONN_DEADLINE_S,
            }
            self._sel.register(conn, selectors.EVENT_READ, "conn")

    def _evict(self, conns: list) -> None:
        """Drop the oldest of ``conns`` that has not been served (else the oldest)."""
        if not conns:
            return
        idle = [c for c in conns if self._conns[c]["served"] == 0] or conns
        self._drop(min(idle, key=lambda c: self._conns[c]["start"]))

    def _drop(self, conn) -> None:
        self._conns.pop(conn, None)
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError, OSError):
            pass
        try:
            conn.close()
        except OSError:
            pass

    def _expire(self, now: float) -> None:
        for conn, st in list(self._conns.items()):
            if now >= st["end"] or (not st["out"] and now >= st["request_by"]):
                self._drop(conn)

    def _service(self, conn, mask: int) -> None:
        import selectors

        st = self._conns.get(conn)
        if st is None:
            return
        try:
            if mask & selectors.EVENT_READ:
                chunk = conn.recv(65536 + 8)
                if not chunk:
                    self._drop(conn)
                    return
                st["inbuf"] += chunk
                if len(st["inbuf"]) > 65536 + 8 + 65536:
                    self._drop(conn)
                    return
                self._answer(conn, st)
            if st["out"] and conn in self._conns:
                sent = conn.send(st["out"])
                del st["out"][:sent]
                if not st["out"]:
                    self._sel.modify(conn, selectors.EVENT_READ, "conn")
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)

    def _answer(self, conn, st: dict) -> None:
        import json
        import selectors

        buf = st["inbuf"]
        while len(buf) >= 8:
            (size,) = struct.unpack("<Q", bytes(buf[:8]))
            if size > 65536:
                self._drop(conn)
                return
            if len(buf) < 8 + size:
                return
            msg = bytes(buf[8 : 8 + size])
            del buf[: 8 + size]
            if msg.startswith(b"NIXLCOMM:SEND"):
                out = b"NIXLCOMM:LOAD" + self.blob
            elif (
                msg.startswith(b"KVCHECK:CONFIRM")
                and self.confirm is not None
                and len(msg) == len(b"KVCHECK:CONFIRM") + 16
            ):
                if self.on_request:
                    self.on_request()
                out = b"KVCHECK:REGIONS" + json.dumps(self.confirm(msg[len(b"KVCHECK:CONFIRM") :])).encode()
            else:
                continue
            st["served"] += 1
            st["request_by"] = time.monotonic() + self.REQUEST_S
            st["out"] += struct.pack("<Q", len(out)) + out
            self._sel.modify(conn, selectors.EVENT_READ | selectors.EVENT_WRITE, "conn")


def _recv(conn: socket.socket, n: int, deadline: float) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        conn.settimeout(left)
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
