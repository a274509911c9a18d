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
- Confirmation (kvcheck agents only): on the same listener a client sends
  ``KVCHECK:CONFIRM`` + a fresh 16-byte nonce; the agent answers ``KVCHECK:REGIONS`` +
  JSON ``{"name", "nonce", "pid", "blob_sha256", "regions": [{"addr", "length", "kind",
  "dev_id"}], "record": {"addr", "length"}}``: the regions it allocated for the probe,
  bound to this connection and nonce; it also writes a record of this answer into its
  registered confirmation page at ``record``, which the probe READs over NIXL (binding
  the answer to the NIXL agent the metadata names, see ``kvcheck.nixl.agent``). An agent published in etcd also stores
  its listener address under
  ``<namespace>/<name>/kvcheck-listener`` so the probe can confirm it. Blobs from files
  and etcd entries (writable by anyone who reaches etcd) are never trusted alone.

Every read has one overall deadline (connect, send, every byte of the answer), so a
stalled or trickling peer or etcd ends the read in time.

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

from kvcheck.errors import InputError, KvcheckError, UnreachableError
from kvcheck.nixl.blob import MAX_BLOB_BYTES, AgentMetadata, parse_metadata

SEND = b"NIXLCOMM:SEND"
LOAD = b"NIXLCOMM:LOAD"
CONFIRM = b"KVCHECK:CONFIRM"
REGIONS = b"KVCHECK:REGIONS"
MAX_CONFIRM_BYTES = 4 * 1024 * 1024
MAX_ETCD_RESPONSE_BYTES = 2 * MAX_BLOB_BYTES
DEFAULT_NAMESPACE = "/nixl/agents/"
LISTENER_LABEL = "kvcheck-listener"


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
        rest = spec[len("etcd://") :]
        hostport, _, name = rest.partition("/")
        host, port = _split_hostport(hostport, spec)
        return Target(kind="etcd", host=host, port=port, name=name or None, raw=spec)
    if os.path.exists(spec):
        return Target(kind="file", path=spec, raw=spec)
    if ":" in spec and "/" not in spec:
        host, port = _split_hostport(spec, spec)
        return Target(kind="listener", host=host, port=port, raw=spec)
    raise InputError(
        "not an agent target: give HOST:PORT (a NIXL listener), etcd://HOST:PORT[/NAME], or a saved blob file",
        source=spec,
    )


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
            raise UnreachableError(
                f"{what}: no answer within the deadline after {len(buf)}/{n} bytes (a frozen or overloaded agent?)",
                source=where,
            )
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            continue
        except OSError as exc:
            raise UnreachableError(f"{what}: connection failed: {exc}", source=where) from None
        if not chunk:
            raise UnreachableError(f"{what}: the agent closed the connection after {len(buf)}/{n} bytes", source=where)
        buf += chunk
    return bytes(buf)


def _connect(host: str, port: int, deadline: float, where: str, refused: str | None = None) -> socket.socket:
    left = deadline - time.monotonic()
    if left <= 0:
        raise UnreachableError("no time left to connect (deadline passed)", source=where)
    try:
        return socket.create_connection((host, port), timeout=left)
    except ConnectionRefusedError:
        raise UnreachableError(
            refused
            or "connection refused: no NIXL listener on this port (agent not started, or started without --listen)",
            source=where,
        ) from None
    except TimeoutError:
        raise UnreachableError(f"no answer to connect within the deadline ({left:.3g} s)", source=where) from None
    except OSError as exc:
        raise UnreachableError(f"cannot connect: {exc}", source=where) from None


def _send_frame(sock: socket.socket, payload: bytes, deadline: float, where: str) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise UnreachableError("no time left to send (deadline passed)", source=where)
    sock.settimeout(left)
    try:
        sock.sendall(struct.pack("<Q", len(payload)) + payload)
    except TimeoutError:
        raise UnreachableError("the request could not be sent within the deadline", source=where) from None
    except OSError as exc:
        raise UnreachableError(f"cannot send the request: {exc}", source=where) from None


def _read_frame(sock: socket.socket, deadline: float, limit: int, what: str, where: str) -> bytes:
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8, deadline, what, where))
    if size > limit:
        raise InputError(
            f"the listener announced a {size}-byte answer, over the {limit}-byte limit: not a NIXL listener?",
            source=where,
        )
    return _recv_exact(sock, size, deadline, what, where)


def _ask_blob(sock: socket.socket, deadline: float, where: str) -> bytes:
    _send_frame(sock, SEND, deadline, where)
    payload = _read_frame(sock, deadline, MAX_BLOB_BYTES + len(LOAD), "metadata fetch", where)
    if not payload.startswith(LOAD):
        raise InputError(f"the answer is not a NIXL metadata frame (starts with {payload[:16]!r})", source=where)
    return payload[len(LOAD) :]


def fetch_listener_blob(host: str, port: int, timeout: float = 5.0) -> bytes:
    """Ask a NIXL listener thread at ``host:port`` for its agent's metadata blob.

    Sends one ``NIXLCOMM:SEND`` frame and reads the ``NIXLCOMM:LOAD`` answer, all within
    ``timeout`` seconds in total (connect, send and every byte of the answer). Returns the
    blob (bytes, without the ``NIXLCOMM:LOAD`` header). Raises ``UnreachableError`` on
    refusal, timeout or a closed socket, ``InputError`` when the answer is not a NIXL
    frame or declares more than ``MAX_BLOB_BYTES``. Mirrors what
    ``nixl_agent.fetch_remote_metadata(name, ip, port)`` does, without an agent.
    """
    where = f"{host}:{port}"
    deadline = time.monotonic() + timeout
    with _connect(host, port, deadline, where) as sock:
        return _ask_blob(sock, deadline, where)


@dataclass
class ConfirmedRegion:
    """A region a kvcheck agent says it allocated for the probe: ``addr``, ``length``
    (bytes), ``kind`` (the memory kind NIXL registered: DRAM or VRAM), ``dev_id``."""

    addr: int
    length: int
    kind: str
    dev_id: int

    def contains(self, addr: int, length: int, kind: str, dev_id: int) -> bool:
        """True when ``[addr, addr + length)`` lies inside this region, same kind and device."""
        return (
            kind == self.kind
            and dev_id == self.dev_id
            and length > 0
            and addr >= self.addr
            and addr + length <= self.addr + self.length
        )


@dataclass
class Confirmation:
    """A kvcheck agent's nonce-bound answer: its ``name``, ``pid``, the SHA-256 of the
    blob it serves (``blob_sha256``, hex), its ``regions``; ``blob`` when fetched on the
    same connection; ``where`` (``HOST:PORT``)."""

    name: str
    pid: int
    blob_sha256: str
    regions: list[ConfirmedRegion]
    where: str
    blob: bytes | None = None
    nonce: bytes = b""
    record: tuple[int, int] | None = None
    answer: dict | None = None

    def covering(self, addr: int, length: int, kind: str, dev_id: int) -> ConfirmedRegion | None:
        """The confirmed region holding ``[addr, addr + length)`` (kind and device equal), or None."""
        for r in self.regions:
            if r.contains(addr, length, kind, dev_id):
                return r
        return None


class NotConfirmable(KvcheckError):
    """The peer answered but does not speak kvcheck's confirmation (a foreign agent or
    NIXL's own listener), or its answer is malformed or bound to another nonce."""


def confirm_agent(
    host: str, port: int, timeout: float = 5.0, *, with_blob: bool = False, nonce: bytes | None = None, precheck=None
) -> Confirmation:
    """Ask the kvcheck agent listening at ``host:port`` which regions it allocated.

    Sends ``KVCHECK:CONFIRM`` + a fresh random 16-byte nonce (or ``nonce``) and checks the
    answer carries the same nonce; with ``with_blob`` first fetches the blob over the same
    connection (so the blob and the confirmation come from one live peer; ``precheck(blob)``
    may raise ``NotConfirmable`` before the confirmation is asked). One overall
    deadline of ``timeout`` seconds. Raises ``UnreachableError`` (refused, closed, no
    answer in time) or ``NotConfirmable`` (answered, but not as a kvcheck agent).
    """
    import hashlib
    import json

    where = f"{host}:{port}"
    deadline = time.monotonic() + timeout
    nonce = nonce or os.urandom(16)
    with _connect(host, port, deadline, where) as sock:
        blob = _ask_blob(sock, deadline, where) if with_blob else None
        if blob is not None and precheck is not None:
            precheck(blob)
        _send_frame(sock, CONFIRM + nonce, deadline, where)
        try:
            payload = _read_frame(sock, deadline, MAX_CONFIRM_BYTES, "region confirmation", where)
        except UnreachableError as exc:
            if "closed the connection" in str(exc):
                raise NotConfirmable(
                    "the agent does not answer kvcheck's region confirmation (not a kvcheck agent, or NIXL's own "
                    "listener)",
                    source=where,
                ) from None
            raise
    if not payload.startswith(REGIONS):
        raise NotConfirmable(
            f"the answer to the region confirmation is not kvcheck's (starts with {payload[:16]!r})", source=where
        )
    try:
        data = json.loads(payload[len(REGIONS) :])
        if data["nonce"] != nonce.hex():
            raise NotConfirmable(
                "the region confirmation is bound to another nonce (a replayed or relayed answer)", source=where
            )
        regions = [
            ConfirmedRegion(int(r["addr"]), int(r["length"]), str(r["kind"]), int(r["dev_id"])) for r in data["regions"]
        ]
        rec = data.get("record")
        record = (int(rec["addr"]), int(rec["length"])) if rec else None
        conf = Confirmation(
            name=str(data["name"]),
            pid=int(data["pid"]),
            blob_sha256=str(data["blob_sha256"]),
            regions=regions,
            where=where,
            blob=blob,
            nonce=nonce,
            record=record,
            answer=data,
        )
    except NotConfirmable:
        raise
    except (ValueError, KeyError, TypeError):
        raise NotConfirmable("the region confirmation is malformed", source=where) from None
    if blob is not None and hashlib.sha256(blob).hexdigest() != conf.blob_sha256:
        raise NotConfirmable("the blob served and the blob confirmed differ", source=where)
    return conf


def _http_post_json(
    endpoint: str, path: str, body: dict, deadline: float, max_bytes: int = MAX_ETCD_RESPONSE_BYTES
) -> tuple[int, bytes]:
    """POST ``body`` as JSON to ``endpoint`` (``http://HOST:PORT``) + ``path`` and return
    ``(status, body bytes)``, all before ``deadline`` (``time.monotonic()`` seconds):
    connect, send, headers and every byte of the body. HTTP/1.1 framing by h11 (httpx's
    own parser); the body is capped at ``max_bytes``. Raises ``UnreachableError``.
    """
    import json
    from urllib.parse import urlsplit

    import h11

    u = urlsplit(endpoint)
    if u.scheme != "http" or not u.hostname:
        raise InputError("etcd endpoint must be http://HOST:PORT", source=endpoint)
    host, port = u.hostname, u.port or 80
    data = json.dumps(body).encode()
    conn = h11.Connection(h11.CLIENT)
    req = h11.Request(
        method="POST",
        target=path,
        headers=[
            ("Host", f"{host}:{port}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Connection", "close"),
        ],
    )
    with _connect(host, port, deadline, endpoint, refused="connection refused: no etcd on this port") as sock:
        left = deadline - time.monotonic()
        sock.settimeout(max(left, 0.001))
        try:
            sock.sendall(conn.send(req) + conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage()))
        except OSError as exc:
            raise UnreachableError(f"etcd: cannot send the request: {exc}", source=endpoint) from None
        status, out = None, bytearray()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise UnreachableError(f"etcd: malformed HTTP answer: {exc}", source=endpoint) from None
            if event is h11.NEED_DATA:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise UnreachableError(
                        f"etcd: no complete answer within the deadline ({len(out)} body bytes so far; a stalled or "
                        "trickling etcd?)",
                        source=endpoint,
                    )
                sock.settimeout(left)
                try:
                    chunk = sock.recv(1 << 16)
                except TimeoutError:
                    continue
                except OSError as exc:
                    raise UnreachableError(f"etcd: connection failed: {exc}", source=endpoint) from None
                conn.receive_data(chunk)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                out += event.data
                if len(out) > max_bytes:
                    raise UnreachableError(f"etcd: the answer is over the {max_bytes}-byte limit", source=endpoint)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                if status is None:
                    raise UnreachableError("etcd closed the connection without an answer", source=endpoint)
                return status, bytes(out)


class EtcdGateway:
    """A minimal etcd v3 client over the JSON gateway (``POST /v3/kv/range``, ``put``,
    ``deleterange``).

    ``endpoint``: ``http://HOST:PORT``. ``timeout`` seconds is one overall deadline for
    every call made through this gateway (``deadline``: a ``time.monotonic()`` instant
    instead), not a per-read timeout. Raises ``UnreachableError`` when etcd does not
    answer in time or answers something that is not the gateway's JSON.
    """

    def __init__(
        self, endpoint: str, timeout: float = 5.0, namespace: str | None = None, deadline: float | None = None
    ):
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else time.monotonic() + timeout
        self.namespace = (
            namespace if namespace is not None else os.environ.get("NIXL_ETCD_NAMESPACE", DEFAULT_NAMESPACE)
        )

    def _post(self, path: str, body: dict) -> dict:
        import json

        status, raw = _http_post_json(self.endpoint, path, body, self.deadline)
        if status != 200:
            raise UnreachableError(
                f"etcd answered HTTP {status}: {raw[:200].decode(errors='replace')}", source=self.endpoint
            )
        try:
            out = json.loads(raw)
        except ValueError:
            raise UnreachableError(
                "etcd's answer is not JSON (not an etcd v3 gateway?)", source=self.endpoint
            ) from None
        if not isinstance(out, dict):
            raise UnreachableError("etcd's answer is not a JSON object", source=self.endpoint)
        return out

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
        try:
            return base64.b64decode(kvs[0].get("value", ""), validate=True)
        except (ValueError, TypeError, AttributeError):
            raise UnreachableError("etcd's answer holds a value that is not base64", source=self.endpoint) from None

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` at ``key`` (no lease)."""
        self._post("/v3/kv/put", {"key": self._b64(key), "value": self._b64(value)})

    def listener_key(self, name: str) -> bytes:
        """The key a kvcheck agent stores its listener ``HOST:PORT`` under (for confirmation)."""
        return f"{self.namespace}/{name}/{LISTENER_LABEL}".encode()

    def list_agents(self) -> list[str]:
        """Names of every agent with metadata under the namespace (stale ones included)."""
        prefix = self.namespace.encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        out = self._post("/v3/kv/range", {"key": self._b64(prefix), "range_end": self._b64(end), "keys_only": True})
        names = []
        for kv in out.get("kvs") or []:
            try:
                key = base64.b64decode(kv["key"]).decode(errors="replace")
            except (ValueError, TypeError, KeyError):
                continue
            rest = key[len(self.namespace) :].strip("/")
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
    kind: str = "file"
    listener: tuple[str, int] | None = None


def read_agents(spec: str, timeout: float = 5.0) -> list[Fetched]:
    """Read the agent(s) ``spec`` names: one for a listener, a file or ``etcd://H:P/NAME``,
    every agent under the namespace for ``etcd://H:P``.

    ``timeout`` is one overall deadline for the whole read (every agent of a listing).
    ``Fetched.listener`` is where the agent can be asked to confirm its regions: the
    listener itself, or for etcd the ``kvcheck-listener`` address the agent published
    (None when it published none). Raises ``InputError`` (bad target or blob),
    ``UnreachableError`` (no answer in time).
    """
    t = parse_target(spec)
    start = time.monotonic()
    deadline = start + timeout
    if t.kind == "file":
        from kvcheck.sources.files import read_bytes_bounded

        blob = read_bytes_bounded(
            Path(t.path or ""), limit=MAX_BLOB_BYTES, what="NIXL metadata blob"
        )  # regular files only
        return [Fetched(spec, blob, parse_metadata(blob, source=spec), time.monotonic() - start, "file")]
    if t.kind == "listener":
        blob = fetch_listener_blob(t.host, t.port, timeout)
        return [
            Fetched(
                spec, blob, parse_metadata(blob, source=spec), time.monotonic() - start, "listener", (t.host, t.port)
            )
        ]
    gw = EtcdGateway(f"http://{t.host}:{t.port}", timeout, deadline=deadline)
    names = [t.name] if t.name else gw.list_agents()
    out = []
    for name in names:
        got = gw.get(gw.key(name))
        if got is None:
            raise UnreachableError(
                f"no metadata for agent {name!r} in etcd (never published, or withdrawn)", source=spec
            )
        src = f"etcd://{t.host}:{t.port}/{name}"
        listener = None
        if t.name:  # one named agent: where it can confirm its regions
            raw = gw.get(gw.listener_key(name))
            if raw:
                try:
                    listener = _split_hostport(raw.decode("ascii", errors="strict"), src)
                except (InputError, UnicodeDecodeError):
                    listener = None
        out.append(Fetched(src, got, parse_metadata(got, source=src), time.monotonic() - start, "etcd", listener))
    return out
