"""A real HTTP server on 127.0.0.1 for the live-source tests (standard library only).

``LoopbackServer(routes)``: ``routes`` maps a path (query ignored) to a ``Reply`` or a
callable ``(handler) -> Reply``. It records every request (method, path with query,
headers) so tests can assert what kvcheck sent. ``require_token`` answers 401 unless
``Authorization: Bearer <token>`` is sent, as SGLang's API-key middleware does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | Any = b""
    content_type: str = "application/json"
    delay: float = 0.0

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


class LoopbackServer:
    def __init__(self, routes: dict[str, Reply | Callable[..., Reply]], *, require_token: str | None = None):
        self.routes = routes
        self.require_token = require_token
        self.seen: list[Seen] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _any(self) -> None:
                outer.seen.append(Seen(self.command, self.path, dict(self.headers)))
                path = self.path.split("?", 1)[0]
                if outer.require_token and path != "/health" and self.headers.get("Authorization") != f"Bearer {outer.require_token}":
                    reply = Reply(401, {"error": "Unauthorized"})
                elif path in outer.routes:
                    r = outer.routes[path]
                    reply = r(self) if callable(r) else r
                else:
                    reply = Reply(404, {"detail": "Not Found"})
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.payload()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_PUT = do_POST = do_DELETE = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "LoopbackServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RawServer:
    """A TCP server on 127.0.0.1 whose every connection is handed to ``handler(conn)``
    (a ``socket.socket``) in its own thread: for servers that misbehave below HTTP
    (stall before answering, trickle headers or a body one byte at a time, send an
    endless chunked body, close mid-body). ``stop`` ends the handlers at their next
    ``self.stopped`` check; the listening socket closes on exit."""

    def __init__(self, handler: Callable[["RawServer", socket.socket], None]):
        self.handler = handler
        self.stopped = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(60)
            read_request(conn)
            self.handler(self, conn)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def __enter__(self) -> "RawServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        try:
            self.sock.close()
        except OSError:
            pass


def read_request(conn: socket.socket) -> bytes:
    """Read one HTTP request head (up to the blank line) from ``conn``."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def trickle(server: RawServer, conn: socket.socket, data: bytes, every: float = 1.0) -> None:
    """Send ``data`` one byte every ``every`` seconds until done or the server stops."""
    for i in range(len(data)):
        if server.stopped.wait(every if i else 0):
            return
        conn.sendall(data[i : i + 1])
