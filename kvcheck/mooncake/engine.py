"""Mooncake's own ``TransferEngine`` (PyPI ``mooncake-transfer-engine``, or
``mooncake-transfer-engine-non-cuda`` without CUDA; both need Debian's ``libibverbs1``),
started the way SGLang starts it (``MooncakeTransferEngine.initialize`` in
``sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py``:
``initialize(hostname, "P2PHANDSHAKE", MOONCAKE_PROTOCOL, ib devices)``), and the
arena kvcheck registers with it: every region in one anonymous mapping, each followed by
an unregistered guard zone (a write outside a region is refused by the peer's engine, and
would be visible in the guards)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import threading
from dataclasses import dataclass

from kvcheck.errors import InputError

GUARD_BYTES = 1 << 16
GUARD_BYTE = 0xA5
ALIGN = 4096
MAGIC = "kvcheck-mooncake-agent/1"


# Where scripts/setup-test-env.sh unpacks Debian's libibverbs1 (and libnl) for Mooncake
# only: installed system-wide, libibverbs makes NIXL's UCX crash at process exit on a host
# without RDMA devices, so kvcheck's test machines keep it out of the loader's path and
# Mooncake's processes preload it (a library loaded by soname satisfies engine.so's need).
PRIVATE_LIBS = ("libnl-3.so.200", "libnl-route-3.so.200", "libibverbs.so.1")


def _preload_ibverbs() -> None:
    import os
    import sys

    try:
        ctypes.CDLL("libibverbs.so.1", mode=ctypes.RTLD_GLOBAL)
        return
    except OSError:
        pass
    d = os.environ.get("KVCHECK_MOONCAKE_LIBDIR") or os.path.join(sys.prefix, "lib", "mooncake-ibverbs")
    for name in PRIVATE_LIBS:
        path = os.path.join(d, name)
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def load_engine():
    """The ``TransferEngine`` class, or ``InputError`` saying what to install."""
    try:
        _preload_ibverbs()
        from mooncake.engine import TransferEngine
    except (ImportError, OSError) as exc:
        raise InputError(
            "the Mooncake probe needs Mooncake's transfer engine: pip install mooncake-transfer-engine-non-cuda "
            f"(mooncake-transfer-engine with CUDA) and apt-get install libibverbs1 ({exc})",
            field="--backend",
        ) from None
    return TransferEngine


def start_engine(host: str, protocol: str, device: str = "", metadata: str = "P2PHANDSHAKE", timeout: float = 60.0):
    """An initialized engine and what it reports: ``(engine, session_id, info)``;
    ``info``: protocol asked, protocol used (``tcp`` when RDMA was asked and the node has
    no RDMA device: Mooncake then installs only its TCP transport), HCAs found."""
    TransferEngine = load_engine()
    engine = TransferEngine()
    result: list = []
    name = host
    if metadata != "P2PHANDSHAKE":
        # With a metadata server (http://.../metadata, etcd://...) the segment is named by
        # the hostname given, which must be unique: host:port of a free port.
        import socket

        with socket.socket() as s:
            s.bind((host, 0))
            name = f"{host}:{s.getsockname()[1]}"
    t = threading.Thread(
        target=lambda: result.append(engine.initialize(name, metadata, protocol, device or "")), daemon=True
    )
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(
            f"Mooncake TransferEngine.initialize({host!r}, {metadata!r}, {protocol!r}, {device!r}) did not return in "
            f"{timeout:g} s"
        )
    if result[0] != 0:
        raise RuntimeError(
            f"Mooncake Transfer Engine initialization failed (ret={result[0]}, protocol {protocol}, device {device!r})"
        )
    hcas = _hcas(engine)
    used = protocol
    if protocol == "rdma" and not hcas:
        used = "tcp"
    session = f"{host}:{engine.get_rpc_port()}" if metadata == "P2PHANDSHAKE" else name
    return (
        engine,
        session,
        {"protocol_requested": protocol, "protocol": used, "hcas": hcas, "metadata": metadata, "device": device or ""},
    )


def _hcas(engine) -> list[str]:
    try:
        topo = json.loads(engine.get_local_topology())
    except Exception:
        return []
    out: set[str] = set()
    for lists in (topo or {}).values():
        for group in lists if isinstance(lists, list) else []:
            out.update(str(x) for x in group if x)
    return sorted(out)


@dataclass
class Region:
    index: int
    offset: int  # in the arena
    nbytes: int
    item_len: int


class Arena:
    """Regions of ``nbytes`` each in one mapping: ``[guard][r0][guard][r1]...[guard]``."""

    def __init__(self, sizes: list[int], item_lens: list[int]):
        self.regions: list[Region] = []
        off = GUARD_BYTES
        for i, (n, item) in enumerate(zip(sizes, item_lens, strict=False)):
            self.regions.append(Region(i, off, n, item))
            off += -(-max(n, 1) // ALIGN) * ALIGN + GUARD_BYTES
        self.size = off
        self.map = mmap.mmap(-1, self.size)
        self.map.write(bytes([GUARD_BYTE]) * self.size)
        self.buf = (ctypes.c_char * self.size).from_buffer(self.map)
        self.base = ctypes.addressof(self.buf)

    def addr(self, index: int, offset: int = 0) -> int:
        return self.base + self.regions[index].offset + offset

    def span(self, index: int, offset: int, length: int) -> bytes:
        r = self.regions[index]
        if not (0 <= offset and length >= 0 and offset + length <= r.nbytes):
            raise ValueError(f"span [{offset}, {offset + length}) is outside region {index} ({r.nbytes} bytes)")
        return self.map[r.offset + offset : r.offset + offset + length]

    def digest(self, index: int, offset: int, length: int) -> str:
        return hashlib.sha256(self.span(index, offset, length)).hexdigest()

    def fill(self, index: int, seed: bytes) -> None:
        r = self.regions[index]
        block = hashlib.sha256(seed).digest() * (ALIGN // 32)
        data = (block * (r.nbytes // len(block) + 1))[: r.nbytes]
        # vary every 4 KiB so misplaced pages do not compare equal
        mixed = bytearray(data)
        for k in range(0, r.nbytes, ALIGN):
            mixed[k : k + 8] = (k // ALIGN).to_bytes(8, "little")
        self.map[r.offset : r.offset + r.nbytes] = bytes(mixed[: r.nbytes])

    def guards_intact(self) -> bool:
        prev = 0
        g = bytes([GUARD_BYTE])
        for r in self.regions:
            if self.map[prev : r.offset].count(g) != r.offset - prev:
                return False
            prev = r.offset + r.nbytes
        return self.map[prev : self.size].count(g) == self.size - prev

    def register(self, engine) -> int:
        regs = [r for r in self.regions if r.nbytes]
        return engine.batch_register_memory([self.addr(r.index) for r in regs], [r.nbytes for r in regs])

    def unregister(self, engine) -> None:
        regs = [r for r in self.regions if r.nbytes]
        try:
            engine.batch_unregister_memory([self.addr(r.index) for r in regs])
        except Exception:
            pass

    def close(self) -> None:
        del self.buf
        try:
            self.map.close()
        except BufferError:
            pass
