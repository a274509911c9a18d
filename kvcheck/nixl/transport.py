"""Reading a NIXL agent's metadata without joining it: listener, etcd, or a file.

- Listener (``HOST:PORT``): NIXL's listener thread speaks u64-length-prefixed frames
  (native byte order, little endian on x86/arm64). A client sends ``NIXLCOMM:SEND`` and
  the agent answers ``NIXLCOMM:LOAD`` + blob on the same socket. No NIXL needed here.
- etcd (``etcd://HOST:PORT/NAME``, or ``etcd://HOST:PORT`` for a listing): NIXL stores
  ``<NIXL_ETCD_NAMESPACE>/<name>/metadata`` (default namespace ``/nixl/agents/``, so keys
  look like ``/nixl/agents//NAME/metadata``) with no lease: a dead agent's key stays.
  kvcheck reads it over etcd's v3 JSON gateway (``/v3/kv/range``) with httpx, which
  kvcheck already depends on: no etcd client library is added.
- A file: a saved blob (``kvcheck inspect ... --save``, or ``get_agent_metadata()``).

Errors: ``UnreachableError`` (exit 3) when nothing answers in time; ``InputError``
(exit 2) for a malformed target or blob.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from kvcheck.errors import InputError, UnreachableError
from kvcheck.nixl.blob import MAX_BLOB_BYTES, AgentMetadata, parse_metadata

SEND = b"NIXLCOMM:SEND"
LOAD = b"NIXLCOMM:LOAD"
DEFAULT_NAMESPACE = "/nixl/agents/"


@dataclass
class Target:
    """A parsed ``inspect``/``--decode-agent`` target. ``kind``: listener, etcd or file."""

    kind: str
    host: str = ""
    port: int = 0
    name: str | None = None
    path: str | None = None
    raw: str = ""


def parse_target(spec: str) -> Target:
    """``HOST:PORT`` (listener), ``etcd://HOST:PORT[/NAME]``, or an existing file path.

    Raises ``InputError`` when ``spec`` is none of these.
    """
    if spec.startswith("etcd://"):
        rest = spec[len("etcd://"):]
        hostport, _, name = rest.partition("/")
        host, port = _split_hostport(hostport, spec)
        return Target(kind="etcd", host=host, port=port, name=name or None, raw=spec)
    if os.path.exists(spec):
        return Target(kind="file", path=spec, raw=spec)
    if ":" in spec and "/" not in spec:
        host, port = _split_hostport(spec, spec)
        return Target(kind="listener", host=host, port=port, raw=spec)
    raise InputError("not an agent target: give HOST:PORT (a NIXL listener), etcd://HOST:PORT[/NAME], or a saved blob file", source=spec)


def _split_hostport(text: str, spec: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise InputError("expected HOST:PORT", source=spec)
    host = host.strip("[]")
    try:
        value = int(port)
    except ValueError:
        raise InputError(f"port {port!r} is not a number", source=spec) from None
    if not 0 < value < 65536:
        raise InputError(f"port {value} is out of range", source=spec)
    return host, value


def _recv_exact(sock: socket.socket, n: int, deadline: float, what: str, where: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise UnreachableError(f"{what}: no answer within the deadline after {len(buf)}/{n} bytes (a frozen or overloaded agent?)", source=where)
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except socket.timeout:
            continue
        except OSError as exc:
            raise UnreachableError(f"{what}: connection failed: {exc}", source=where) from None
        if not chunk:
            raise UnreachableError(f"{what}: the agent closed the connection after {len(buf)}/{n} bytes", source=where)
        buf += chunk
    return bytes(buf)


def fetch_listener_blob(host: str, port: int, timeout: float = 5.0) -> bytes:
    """Ask a NIXL listener thread at ``host:port`` for its agent's metadata blob.

    Sends one ``NIXLCOMM:SEND`` frame and reads the ``NIXLCOMM:LOAD`` answer, all within
    ``timeout`` seconds. Returns the blob (bytes, without the ``NIXLCOMM:LOAD`` header).
    Raises ``UnreachableError`` on refusal, timeout or a closed socket, ``InputError``
    when the answer is not a NIXL frame or declares more than ``MAX_BLOB_BYTES``.
    Mirrors what ``nixl_agent.fetch_remote_metadata(name, ip, port)`` does, without an agent.
    """
    where = f"{host}:{port}"
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise UnreachableError("connection refused: no NIXL listener on this port (agent not started, or started without --listen)", source=where) from None
    except (socket.timeout, TimeoutError):
        raise UnreachableError(f"no answer to connect within {timeout:g} s", source=where) from None
    except OSError as exc:
        raise UnreachableError(f"cannot connect: {exc}", source=where) from None
    with sock:
        try:
            sock.sendall(struct.pack("<Q", len(SEND)) + SEND)
        except OSError as exc:
            raise UnreachableError(f"cannot send the metadata request: {exc}", source=where) from None
        (size,) = struct.unpack("<Q", _recv_exact(sock, 8, deadline, "metadata fetch", where))
        if size > MAX_BLOB_BYTES + len(LOAD):
            raise InputError(f"the listener announced a {size}-byte answer, over the {MAX_BLOB_BYTES}-byte limit: not a NIXL listener?", source=where)
        payload = _recv_exact(sock, size, deadline, "metadata fetch", where)
    if not payload.startswith(LOAD):
        raise InputError(f"the answer is not a NIXL metadata frame (starts with {payload[:16]!r})", source=where)
    return payload[len(LOAD):]


class EtcdGateway:
    """A minimal etcd v3 client over the JSON gateway (``POST /v3/kv/range``, ``deleterange``).

    ``endpoint``: ``http://HOST:PORT``. Every call has ``timeout`` seconds. Raises
    ``UnreachableError`` when etcd does not answer.
    """

    def __init__(self, endpoint: str, timeout: float = 5.0, namespace: str | None = None):
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.namespace = namespace if namespace is not None else os.environ.get("NIXL_ETCD_NAMESPACE", DEFAULT_NAMESPACE)

    def _post(self, path: str, body: dict) -> dict:
        import httpx

        try:
            resp = httpx.post(f"{self.endpoint}{path}", json=body, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise UnreachableError(f"etcd did not answer: {exc}", source=self.endpoint) from None
        if resp.status_code != 200:
            raise UnreachableError(f"etcd answered HTTP {resp.status_code}: {resp.text[:200]}", source=self.endpoint)
        return resp.json()

    @staticmethod
    def _b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def key(self, name: str) -> bytes:
        """The key NIXL stores ``name``'s full metadata under."""
        return f"{self.namespace}/{name}/metadata".encode()

    def get(self, key: bytes) -> bytes | None:
        """The value at ``key`` or None."""
        out = self._post("/v3/kv/range", {"key": self._b64(key)})
        kvs = out.get("kvs") or []
        if not kvs:
            return None
        return base64.b64decode(kvs[0].get("value", ""))

    def list_agents(self) -> list[str]:
        """Names of every agent with metadata under the namespace (stale ones included)."""
        prefix = self.namespace.encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        out = self._post("/v3/kv/range", {"key": self._b64(prefix), "range_end": self._b64(end), "keys_only": True})
        names = []
        for kv in out.get("kvs") or []:
            key = base64.b64decode(kv["key"]).decode(errors="replace")
            rest = key[len(self.namespace):].strip("/")
            name, _, label = rest.rpartition("/")
            if label == "metadata" and name:
                names.append(name)
        return sorted(set(names))

    def delete_agent(self, name: str) -> None:
        """Delete every key of agent ``name`` (what ``invalidate_local_metadata`` does)."""
        prefix = f"{self.namespace}/{name}/".encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        self._post("/v3/kv/deleterange", {"key": self._b64(prefix), "range_end": self._b64(end)})


@dataclass
class Fetched:
    """One agent's metadata as read from ``source``: the raw blob, parsed, and seconds taken."""

    source: str
    blob: bytes
    meta: AgentMetadata
    seconds: float


def read_agents(spec: str, timeout: float = 5.0) -> list[Fetched]:
    """Read the agent(s) ``spec`` names: one for a listener, a file or ``etcd://H:P/NAME``,
    every agent under the namespace for ``etcd://H:P``.

    Raises ``InputError`` (bad target or blob), ``UnreachableError`` (no answer in time).
    """
    t = parse_target(spec)
    start = time.monotonic()
    if t.kind == "file":
        path = Path(t.path or "")
        if path.stat().st_size > MAX_BLOB_BYTES:
            raise InputError(f"file is over the {MAX_BLOB_BYTES}-byte blob limit", source=spec)
        blob = path.read_bytes()
        return [Fetched(spec, blob, parse_metadata(blob, source=spec), time.monotonic() - start)]
    if t.kind == "listener":
        blob = fetch_listener_blob(t.host, t.port, timeout)
        return [Fetched(spec, blob, parse_metadata(blob, source=spec), time.monotonic() - start)]
    gw = EtcdGateway(f"http://{t.host}:{t.port}", timeout)
    names = [t.name] if t.name else gw.list_agents()
    out = []
    for name in names:
        blob = gw.get(gw.key(name))
        if blob is None:
            raise UnreachableError(f"no metadata for agent {name!r} in etcd (never published, or withdrawn)", source=spec)
        src = f"etcd://{t.host}:{t.port}/{name}"
        out.append(Fetched(src, blob, parse_metadata(blob, source=src), time.monotonic() - start))
    return out
