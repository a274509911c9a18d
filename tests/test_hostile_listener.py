"""The agent's listener cannot be locked by clients that hold connections (issue 17):
one thread serves every connection, idle ones are dropped after a short time and
evicted first when the listener is full, so a probe's confirmation always gets through.
A real socket server on 127.0.0.1 (``kvcheck.nixl.agent._MetadataServer``), no NIXL needed.
"""

from __future__ import annotations

import json
import socket
import struct
import time

from kvcheck.nixl.agent import _MetadataServer

BLOB = b"\x01" * 5000


def _ask(port: int, msg: bytes, timeout: float = 3.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(struct.pack("<Q", len(msg)) + msg)
        head = b""
        while len(head) < 8:
            chunk = c.recv(8 - len(head))
            assert chunk, "closed"
            head += chunk
        (n,) = struct.unpack("<Q", head)
        body = b""
        while len(body) < n:
            chunk = c.recv(n - len(body))
            assert chunk, "closed"
            body += chunk
        return body


def test_confirmations_get_through_while_hundreds_of_connections_are_held():
    srv = _MetadataServer("127.0.0.1", 0, BLOB, confirm=lambda nonce: {"nonce": nonce.hex()})
    srv.start()
    held = []
    try:
        for _ in range(400):  # 25x the old 16 slots, more than MAX_CLIENTS: the oldest idle are evicted
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=2)
            held.append(s)
        t0 = time.monotonic()
        assert _ask(srv.port, b"NIXLCOMM:SEND") == b"NIXLCOMM:LOAD" + BLOB
        answer = _ask(srv.port, b"KVCHECK:CONFIRM" + bytes(range(16)))
        assert answer.startswith(b"KVCHECK:REGIONS") and json.loads(answer[len(b"KVCHECK:REGIONS"):]) == {"nonce": bytes(range(16)).hex()}
        assert time.monotonic() - t0 < 2.0
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_an_idle_or_trickling_client_is_dropped_within_the_first_byte_timeout():
    srv = _MetadataServer("127.0.0.1", 0, BLOB)
    srv.start()
    try:
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        idle.sendall(b"\x10")  # one byte of a header, then nothing
        t0 = time.monotonic()
        assert idle.recv(1) == b""  # closed by the listener
        assert time.monotonic() - t0 < srv.FIRST_BYTE_S + 2
        idle.close()
    finally:
        srv.stop()


def test_oversized_and_unknown_requests():
    srv = _MetadataServer("127.0.0.1", 0, BLOB)
    srv.start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as c:
            c.sendall(struct.pack("<Q", 1 << 40))
            assert c.recv(1) == b""  # over 64 KiB: closed at once
        # unknown commands are ignored, the connection then still answers
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as c:
            c.sendall(struct.pack("<Q", 13) + b"NIXLCOMM:LOAD" + struct.pack("<Q", 13) + b"NIXLCOMM:SEND")
            head = c.recv(8)
            assert struct.unpack("<Q", head)[0] == len(b"NIXLCOMM:LOAD" + BLOB)
    finally:
        srv.stop()
