"""A pure-Python reader of a NIXL agent's metadata blob (``get_agent_metadata()``).

The blob is what an agent publishes through its listener thread, etcd, or by hand. It
is NIXL's own serializer output (``nixlSerDes``, nixl 1.5.x), a flat sequence of tagged
fields after the magic ``nixlSerDes|``::

    field := TAG  u64(len, little endian)  BYTES[len]  '|'

in this order (``nixlAgentData::getLocalMD`` / ``nixlLocalSection::serialize``):

    Agent=<name>  Conns=u64 n  n x (t=<backend> c=<opaque conn info>)
    ""="MemSection"  nixlSecElms=u64 m
    m x (bknd=<backend>  nixlDList="nixlSDList"  t=u32 kind  n=u64 k  k x (""=<desc>))

and each ``desc`` is ``addr u64, len u64, devId u64`` followed by the backend's opaque
remote key (UCX: a packed rkey). Kinds: DRAM 0, VRAM 1, BLK 2, OBJ 3, FILE 4. There is
no version field; nixl 1.5.1 is what was read.

The blob is untrusted input: every length is checked against what is left before any
slice is taken, counts are bounded by the bytes that could hold them, and the whole
blob is capped (``MAX_BLOB_BYTES``). Bad input raises ``BlobError`` (an ``InputError``,
exit 2), never another exception and never a large allocation.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field

from kvcheck.errors import InputError

MAGIC = b"nixlSerDes|"
MAX_BLOB_BYTES = 64 * 1024 * 1024
KIND_NAMES = {0: "DRAM", 1: "VRAM", 2: "BLK", 3: "OBJ", 4: "FILE"}
_DESC_HEAD = 24  # addr, len, devId: three u64
_MIN_FIELD = 8 + 1  # u64 length + '|'


class BlobError(InputError):
    """The metadata blob is truncated, oversized or malformed (exit 2)."""


@dataclass
class BlobRegion:
    """One registered region as the remote agent advertises it: ``addr`` (remote
    virtual address), ``length`` (bytes), ``dev_id`` (GPU ordinal for VRAM, 0 for DRAM
    by convention), ``key_len`` (bytes of the backend's opaque remote key)."""

    addr: int
    length: int
    dev_id: int
    key_len: int


@dataclass
class BlobSection:
    """All regions one backend registered for one memory kind."""

    backend: str
    kind: str
    regions: list[BlobRegion] = field(default_factory=list)


@dataclass
class AgentMetadata:
    """A parsed blob: the agent's ``name``, each backend with connection info
    (``conn_info_len`` bytes, opaque), and per (backend, kind) section its regions."""

    name: str
    backends: dict[str, int]
    sections: list[BlobSection]
    size: int

    def regions(self, kind: str | None = None, backend: str | None = None) -> list[BlobRegion]:
        """Regions of ``kind`` (all kinds when None), in the order the blob lists them."""
        out: list[BlobRegion] = []
        for s in self.sections:
            if (kind is None or s.kind == kind) and (backend is None or s.backend == backend):
                out.extend(s.regions)
        return out

    def kind_counts(self, backend: str | None = None) -> dict[str, int]:
        """Regions per memory kind, e.g. ``{"DRAM": 2, "VRAM": 64}``."""
        counts: dict[str, int] = {}
        for s in self.sections:
            if backend is None or s.backend == backend:
                counts[s.kind] = counts.get(s.kind, 0) + len(s.regions)
        return counts

    def as_dict(self) -> dict:
        """JSON-ready form (the ``inspect --format json`` output)."""
        return {
            "name": self.name,
            "size": self.size,
            "backends": [{"name": b, "conn_info_bytes": n} for b, n in self.backends.items()],
            "sections": [
                {"backend": s.backend, "kind": s.kind, "regions": [asdict(r) for r in s.regions]} for s in self.sections
            ],
            "kind_counts": self.kind_counts(),
        }


class _Reader:
    def __init__(self, data: bytes, source: str):
        self.data = data
        self.pos = len(MAGIC)
        self.source = source

    def fail(self, what: str) -> BlobError:
        return BlobError(f"malformed NIXL metadata blob at byte {self.pos}: {what}", source=self.source)

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def field(self, tag: bytes, what: str, *, max_len: int | None = None) -> bytes:
        end_tag = self.pos + len(tag)
        if end_tag + 8 > len(self.data):
            raise self.fail(f"truncated before {what} (tag {tag.decode() or '<empty>'!r})")
        if self.data[self.pos : end_tag] != tag:
            got = self.data[self.pos : end_tag + 4]
            raise self.fail(f"expected tag {tag.decode() or '<empty>'!r} for {what}, found {got!r}")
        (length,) = struct.unpack_from("<Q", self.data, end_tag)
        start = end_tag + 8
        if length > len(self.data) - start - 1:
            raise self.fail(f"{what} declares {length} bytes but only {max(0, len(self.data) - start - 1)} remain")
        if max_len is not None and length > max_len:
            raise self.fail(f"{what} is {length} bytes, over the {max_len}-byte limit")
        if self.data[start + length : start + length + 1] != b"|":
            raise self.fail(f"{what} is not terminated by '|'")
        self.pos = start + length + 1
        return self.data[start : start + length]

    def u64(self, tag: bytes, what: str) -> int:
        raw = self.field(tag, what)
        if len(raw) != 8:
            raise self.fail(f"{what} should be 8 bytes, is {len(raw)}")
        return struct.unpack("<Q", raw)[0]

    def text(self, tag: bytes, what: str, max_len: int = 4096) -> str:
        raw = self.field(tag, what, max_len=max_len)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def count(self, tag: bytes, what: str, min_each: int) -> int:
        n = self.u64(tag, what)
        # A count cannot exceed what the remaining bytes could hold: no huge loops.
        if n * min_each > self.remaining():
            raise self.fail(f"{what} is {n}, more than the {self.remaining()} remaining bytes can hold")
        return n


def parse_metadata(data: bytes, *, source: str = "metadata blob", max_bytes: int = MAX_BLOB_BYTES) -> AgentMetadata:
    """Parse a NIXL 1.5.x agent metadata blob into an ``AgentMetadata``.

    ``data``: the raw bytes (up to ``max_bytes``). Raises ``BlobError`` for anything that
    is not a well-formed blob: wrong magic, truncation, a length past the end, a count the
    remaining bytes cannot hold, non-UTF-8 names, an unknown memory kind, trailing bytes.
    Mirrors the order ``nixlAgent::loadRemoteMD`` reads, without NIXL's lenience (NIXL
    returns empty strings on short input; kvcheck says where it stopped).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BlobError(f"expected bytes, got {type(data).__name__}", source=source)
    data = bytes(data)
    if len(data) > max_bytes:
        raise BlobError(f"blob is {len(data)} bytes, over the {max_bytes}-byte limit", source=source)
    if not data.startswith(MAGIC):
        head = data[:16]
        raise BlobError(
            f"not a NIXL metadata blob: it should start with {MAGIC!r}, starts with {head!r}", source=source
        )
    r = _Reader(data, source)
    name = r.text(b"Agent", "agent name")
    if not name:
        raise r.fail("empty agent name")
    n_conns = r.count(b"Conns", "backend count", 2 * _MIN_FIELD + 2)
    backends: dict[str, int] = {}
    for _ in range(n_conns):
        backend = r.text(b"t", "backend name", max_len=256)
        conn = r.field(b"c", f"{backend} connection info")
        backends[backend] = len(conn)
    marker = r.field(b"", "memory section marker", max_len=64)
    if marker != b"MemSection":
        raise r.fail(f"expected the 'MemSection' marker, found {marker[:32]!r}")
    n_sections = r.count(b"nixlSecElms", "section count", 4 * _MIN_FIELD)
    sections: list[BlobSection] = []
    for _ in range(n_sections):
        backend = r.text(b"bknd", "section backend", max_len=256)
        dtype = r.field(b"nixlDList", "descriptor list type", max_len=64)
        if dtype != b"nixlSDList":
            raise r.fail(f"descriptor list type {dtype[:32]!r}, expected b'nixlSDList'")
        kind_raw = r.field(b"t", "memory kind")
        if len(kind_raw) not in (4, 8):
            raise r.fail(f"memory kind field is {len(kind_raw)} bytes")
        kind_code = int.from_bytes(kind_raw, "little")
        if kind_code not in KIND_NAMES:
            raise r.fail(f"unknown memory kind {kind_code}")
        n_desc = r.count(b"n", "descriptor count", _MIN_FIELD + _DESC_HEAD)
        sec = BlobSection(backend=backend, kind=KIND_NAMES[kind_code])
        for _ in range(n_desc):
            raw = r.field(b"", "descriptor")
            if len(raw) < _DESC_HEAD:
                raise r.fail(f"descriptor is {len(raw)} bytes, shorter than addr+len+devId (24)")
            addr, length, dev = struct.unpack_from("<QQQ", raw)
            sec.regions.append(BlobRegion(addr=addr, length=length, dev_id=dev, key_len=len(raw) - _DESC_HEAD))
        sections.append(sec)
    if r.remaining():
        raise r.fail(f"{r.remaining()} unexpected trailing bytes")
    return AgentMetadata(name=name, backends=backends, sections=sections, size=len(data))
