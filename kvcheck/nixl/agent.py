"""kvcheck's own NIXL agent: one side's KV regions, registered the way the runtime would.

SGLang's agent cannot be queried, so kvcheck runs a stand-in with the same geometry
(region count, item length per page, memory kind per region), NIXL version, backend
and UCX environment. It proves the node can register each memory kind (the runtime's
``NIXL memory registration failed for {kind} kv tensors``) and gives the probe a target.

Layout conventions (so a reader of the blob alone can recover region order):
- all regions of one memory kind live in one arena, carved in region-index order, so
  within a kind, address order is index order;
- DRAM regions carry ``dev_id = DEV_TAG | [STANDIN_BIT] | index`` (UCX ignores the
  device id of host memory; it only has to match between registration and transfer).
  ``STANDIN_BIT`` marks a VRAM region registered as DRAM on a host without a GPU.

- one extra 4 KiB DRAM page with ``dev_id = CONFIRM_DEV_ID`` is not a KV region: the
  agent writes the answer to each confirmation into it (``confirmation_record``) and the
  probe READs it back over NIXL, which binds the listener's answer to the NIXL agent the
  metadata names (a listener that is not that agent cannot make it appear there);
- each kind's arena is framed by two guard zones (``GUARD_BYTES`` each, filled with
  ``GUARD_BYTE``) that belong to no region: a write outside the regions lands there
  first and is visible (``guards`` in the ready line, ``guards_intact()``).

Exposure: the metadata is always served by kvcheck's own read-only listener (default
127.0.0.1 on a free port), which speaks NIXL's listener protocol (``NIXLCOMM:SEND`` ->
``NIXLCOMM:LOAD`` + blob), ignores ``LOAD``/``INVL`` from peers, and answers kvcheck's
region confirmation (``KVCHECK:CONFIRM`` + nonce -> the regions, see
``kvcheck.nixl.transport``). NIXL 1.5.1's own listener thread (binds every interface,
accepts metadata from anyone) is never started. etcd entries have no lease: the agent
deletes them on exit; a killed agent leaves a stale key.

Idle cost: NIXL's progress thread polls without sleeping (``pthrDelay = 0`` in
nixl 1.5.1's ``nixl_agent``), so kvcheck creates agents without it; the agent's own loop
drives UCX progress (``get_new_notifs``) every ``IDLE_POLL_S`` when idle and every
``BUSY_POLL_S`` for ``BUSY_WINDOW_S`` after a confirmation request or a notification.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from kvcheck.errors import InputError
from kvcheck.nixl.listener import _MetadataServer, _recv  # noqa: F401  (_recv: the protocol's reader, for tests)
from kvcheck.nixl.runtime import error_class, load_nixl

DEV_TAG = 0x6B76 << 32  # "kv"
STANDIN_BIT = 1 << 24
CONFIRM_BIT = 1 << 25
CONFIRM_DEV_ID = DEV_TAG | CONFIRM_BIT
CONFIRM_SLOTS = 64
CONFIRM_SLOT_BYTES = 64
RECORD_MAGIC = b"KVCHECK1"
PAGE_ALIGN = 4096
MAX_AGENT_BYTES_DEFAULT = 4 << 30
GUARD_BYTES = 1 << 20
GUARD_BYTE = 0xA5
IDLE_POLL_S = 0.1
BUSY_POLL_S = 0.001
BUSY_WINDOW_S = 15.0
MAX_TTL_S = 7 * 24 * 3600


def dram_dev_id(index: int, standin: bool) -> int:
    """The device id kvcheck gives DRAM region ``index`` (see the module docstring)."""
    return DEV_TAG | (STANDIN_BIT if standin else 0) | index


def decode_dev_id(dev_id: int) -> tuple[int, bool] | None:
    """``(index, is_vram_standin)`` for a kvcheck DRAM region device id, None for any
    other (the confirmation page's ``CONFIRM_DEV_ID`` included)."""
    if dev_id >> 32 != DEV_TAG >> 32 or dev_id & CONFIRM_BIT:
        return None
    return dev_id & (STANDIN_BIT - 1), bool(dev_id & STANDIN_BIT)


@dataclass
class LayoutRegion:
    """One region to allocate: the runtime's memory ``kind`` and ``item_len`` (bytes/page)."""

    kind: str
    item_len: int


@dataclass
class Layout:
    """What an agent registers: ``regions`` in registration order, ``pages`` per region.

    Each region is ``item_len * pages`` bytes. ``from_geometry`` takes a
    ``SideGeometry`` (its regions' kinds and item lengths).
    """

    role: str
    regions: list[LayoutRegion]
    pages: int

    @classmethod
    def from_geometry(cls, geometry, pages: int) -> Layout:
        """The layout of ``geometry`` (``kvcheck.sglang.geometry.SideGeometry``) with ``pages`` pages."""
        if pages < 1:
            raise InputError("--pages must be at least 1", field="--pages")
        return cls(
            role=geometry.role, regions=[LayoutRegion(r.kind, r.item_len) for r in geometry.regions], pages=pages
        )

    @property
    def total_bytes(self) -> int:
        return sum(r.item_len * self.pages for r in self.regions)

    def as_dict(self) -> dict:
        return {"role": self.role, "pages": self.pages, "regions": [[r.kind, r.item_len] for r in self.regions]}

    @classmethod
    def from_dict(cls, data: dict) -> Layout:
        return cls(
            role=data["role"], pages=int(data["pages"]), regions=[LayoutRegion(k, int(n)) for k, n in data["regions"]]
        )


@dataclass
class Registered:
    """One allocated region: ``addr``/``length`` (bytes), ``dev_id``, the kind NIXL
    registered (``reg_kind``), the runtime's kind (``kind``), and whether it is a stand-in."""

    index: int
    kind: str
    reg_kind: str
    addr: int
    length: int
    dev_id: int
    item_len: int
    standin: bool


@dataclass
class RegistrationIssue:
    """Registration of one memory kind failed or could not be attempted."""

    kind: str
    error_class: str
    message: str
    finding_id: str


def gpu_allocator():
    """``(name, alloc(nbytes, device) -> (obj, addr))`` using torch or cupy when a GPU is
    visible, else None. Never imports either unless installed, and not at all on a host
    without an NVIDIA driver (no ``/dev/nvidiactl`` or ``/proc/driver/nvidia``): importing
    torch alone takes seconds, which used to be counted as registration time."""
    import importlib.util

    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")):
        return None

    if importlib.util.find_spec("torch") is not None:
        try:
            import torch

            if torch.cuda.is_available():

                def alloc(nbytes: int, device: int):
                    t = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
                    return t, t.data_ptr()

                return "torch", alloc
        except Exception:  # a broken CUDA install: treat as no GPU
            pass
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:

                def alloc(nbytes: int, device: int):
                    with cupy.cuda.Device(device):
                        a = cupy.zeros(nbytes, dtype=cupy.uint8)
                    return a, int(a.data.ptr)

                return "cupy", alloc
        except Exception:
            pass
    return None


def confirmation_record(nonce: bytes, answer: dict) -> bytes:
    """The ``CONFIRM_SLOT_BYTES`` bytes an agent writes into its confirmation page for
    ``nonce``: ``RECORD_MAGIC`` + nonce (16) + SHA-256 of the canonical JSON of the answer's
    name, pid, blob_sha256 and regions (32) + zero padding."""
    import hashlib
    import json

    body = {k: answer[k] for k in ("name", "pid", "blob_sha256", "regions")}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).digest()
    return (RECORD_MAGIC + nonce + digest).ljust(CONFIRM_SLOT_BYTES, b"\0")


def check_memory_cap(layout: Layout, max_bytes: int) -> None:
    """Refuse (``InputError``, exit 2) a layout whose regions need more than ``max_bytes``
    (pages x item length summed over regions), before anything is allocated."""
    total = layout.total_bytes
    if total > max_bytes:
        raise InputError(
            f"{len(layout.regions)} regions x {layout.pages} pages need {total} bytes ({total / 2**30:.2f} GiB), "
            "over the "
            f"{max_bytes / 2**30:.2f} GiB agent memory cap: lower --pages or raise --max-memory",
            field="--pages",
        )


def check_ttl(ttl) -> float:
    """``ttl`` as seconds when finite and in (0, ``MAX_TTL_S``] (7 days); ``InputError`` otherwise."""
    import math

    try:
        value = float(ttl)
    except (TypeError, ValueError):
        value = float("nan")
    if ttl is None or not math.isfinite(value) or not 0 < value <= MAX_TTL_S:
        raise InputError(
            f"--ttl SECONDS is required: a finite number above 0 and at most {MAX_TTL_S} (7 days); got {ttl!r}. "
            "An agent never runs unbounded",
            field="--ttl",
        )
    return value


def _align(n: int) -> int:
    return (n + PAGE_ALIGN - 1) // PAGE_ALIGN * PAGE_ALIGN


def agent_name(role: str) -> str:
    """``kvcheck-<role>-<host>-<pid>``: the name an agent publishes under."""
    return f"kvcheck-{role}-{socket.gethostname()}-{os.getpid()}"


class KvAgent:
    """A NIXL agent holding one side's KV regions.

    ``layout``: what to register; ``listen``: ``(host, port)`` or None; ``etcd``: an
    ``http://HOST:PORT`` endpoint or None; ``gpu``: ``auto`` (VRAM on a GPU when torch or
    cupy sees one, DRAM stand-ins otherwise), ``off`` (always stand-ins); ``device``: the
    GPU ordinal; ``max_bytes``: the memory cap (``Layout.total_bytes`` above it is refused
    before anything is allocated). ``start()`` creates, allocates, registers and
    publishes; ``close()`` deregisters and withdraws. Registration failures are collected
    in ``issues``.
    """

    def __init__(
        self,
        layout: Layout,
        *,
        name: str | None = None,
        listen: tuple[str, int] | None = None,
        etcd: str | None = None,
        backend: str = "UCX",
        gpu: str = "auto",
        device: int = 0,
        max_bytes: int = MAX_AGENT_BYTES_DEFAULT,
    ):
        self.layout = layout
        self.name = name or agent_name(layout.role)
        self.listen = listen
        self.etcd = etcd
        self.backend = backend
        self.gpu = gpu
        self.device = device
        self.max_bytes = max_bytes
        self.guards: list[tuple[int, int]] = []
        self._busy_until = 0.0
        self._confirm_page: int | None = None
        self._confirm_lock = threading.Lock()
        self.regions: list[Registered] = []
        self.issues: list[RegistrationIssue] = []
        self.timings: dict[str, float] = {}
        self.notifications: list[tuple[str, bytes]] = []
        self.gpu_backend: str | None = None
        self._keep: list = []
        self._reg_descs: list = []
        self._agent: Any = None  # nixl._api.nixl_agent (NIXL ships no types)
        self._server: _MetadataServer | None = None
        self._published_etcd = False
        self._blob: bytes | None = None

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        """Create the NIXL agent, allocate and register every region, then publish.

        Raises ``InputError`` when the layout is over ``max_bytes``, NIXL is missing, the
        backend cannot be created, or the listen port cannot be bound. Per-kind
        registration failures go to ``issues``.
        """
        check_memory_cap(self.layout, self.max_bytes)
        t0 = time.monotonic()
        api = load_nixl()
        if self.etcd:
            os.environ["NIXL_ETCD_ENDPOINTS"] = self.etcd
            self._check_name_free()
        # No NIXL progress thread (it spins a core, see the module docstring) and no NIXL
        # listener thread: kvcheck's own listener serves the metadata.
        cfg = api.nixl_agent_config(enable_prog_thread=False, enable_listen_thread=False, backends=[])
        try:
            self._agent = api.nixl_agent(self.name, cfg)
            self._agent.create_backend(self.backend)
        except Exception as exc:
            raise InputError(
                f"cannot start a NIXL agent with backend {self.backend}: {error_class(exc)}: {exc}"
            ) from None
        self.timings["agent_start_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        gpu = gpu_allocator() if self.gpu == "auto" else None
        self.timings["gpu_detect_s"] = time.monotonic() - t1
        t1 = time.monotonic()
        self._allocate_and_register(gpu)
        self._register_confirm_page()
        self.timings["register_s"] = time.monotonic() - t1
        self._blob = self._agent.get_agent_metadata()
        t2 = time.monotonic()
        if self.listen:
            self._server = _MetadataServer(
                self.listen[0], self.listen[1], self._blob, self.confirmation, self._mark_busy
            )
            self._server.start()
        if self.etcd:
            self._agent.send_local_metadata()
            self._published_etcd = True
            if self._server is not None:
                from kvcheck.nixl.transport import EtcdGateway

                try:
                    gw = EtcdGateway(self.etcd, timeout=5.0)
                    gw.put(gw.listener_key(self.name), f"{self._server.host}:{self._server.port}".encode())
                except Exception as exc:
                    self.issues.append(
                        RegistrationIssue(
                            kind="-",
                            error_class=error_class(exc),
                            finding_id="agent-publish-failed",
                            message="could not publish the listener address in etcd (probes cannot confirm this "
                            f"agent): {exc}",
                        )
                    )
        self.timings["publish_s"] = time.monotonic() - t2

    def _register_confirm_page(self) -> None:
        import numpy as np

        page = np.zeros(2 * PAGE_ALIGN, dtype=np.uint8)
        addr = _align(page.ctypes.data)
        try:
            descs = self._agent.register_memory(
                [(addr, PAGE_ALIGN, CONFIRM_DEV_ID, "")], "DRAM", backends=[self.backend]
            )
        except Exception as exc:
            self.issues.append(
                RegistrationIssue(
                    kind="DRAM",
                    error_class=error_class(exc),
                    finding_id="agent-register-failed",
                    message=f"NIXL memory registration failed for the DRAM confirmation page: {error_class(exc)}: "
                    f"{exc}",
                )
            )
            return
        self._keep.append(page)
        self._reg_descs.append(descs)
        self._confirm_page = addr

    @property
    def confirm_page(self) -> int | None:
        """Address of the registered confirmation page (``CONFIRM_SLOTS`` x ``CONFIRM_SLOT_BYTES``)."""
        return self._confirm_page

    def confirmation(self, nonce: bytes) -> dict:
        """The answer to ``KVCHECK:CONFIRM`` + ``nonce``: name, pid, the blob's SHA-256,
        every region allocated for the probe (``addr``, ``length``, NIXL ``kind``,
        ``dev_id``), and ``record`` (``addr``, ``length``): where in the confirmation page
        ``confirmation_record(nonce, answer)`` now lies, for the probe to READ over NIXL."""
        import ctypes
        import hashlib

        answer = {
            "name": self.name,
            "nonce": nonce.hex(),
            "pid": os.getpid(),
            "blob_sha256": hashlib.sha256(self._blob or b"").hexdigest(),
            "regions": [
                {"addr": g.addr, "length": g.length, "kind": g.reg_kind, "dev_id": g.dev_id} for g in self.regions
            ],
        }
        if self._confirm_page is not None:
            slot = int.from_bytes(nonce[:2], "little") % CONFIRM_SLOTS
            addr = self._confirm_page + slot * CONFIRM_SLOT_BYTES
            rec = confirmation_record(nonce, answer)
            with self._confirm_lock:
                ctypes.memmove(addr, rec, len(rec))
            answer["record"] = {"addr": addr, "length": CONFIRM_SLOT_BYTES}
        return answer

    def _mark_busy(self) -> None:
        self._busy_until = time.monotonic() + BUSY_WINDOW_S

    def guards_intact(self) -> bool:
        """True when every guard zone still holds only ``GUARD_BYTE`` (DRAM arenas)."""
        import ctypes

        for addr, length in self.guards:
            if ctypes.string_at(addr, length) != bytes([GUARD_BYTE]) * length:
                return False
        return True

    def _check_name_free(self) -> None:
        from kvcheck.nixl.transport import EtcdGateway

        if not self.etcd:
            return
        try:
            gw = EtcdGateway(self.etcd, timeout=3.0)
            if gw.get(gw.key(self.name)) is not None:
                # A stale entry of a dead process with our pid: never reuse the name.
                self.name = f"{self.name}-{os.urandom(3).hex()}"
        except Exception:
            pass  # NIXL reports an unreachable etcd itself when publishing

    def _allocate_and_register(self, gpu) -> None:
        import numpy as np

        pages = self.layout.pages
        self.gpu_backend = gpu[0] if gpu else None
        by_kind: dict[str, list[int]] = {}
        for i, r in enumerate(self.layout.regions):
            by_kind.setdefault(r.kind, []).append(i)
        for kind, idxs in by_kind.items():
            standin = kind == "VRAM" and gpu is None
            reg_kind = "DRAM" if (kind == "DRAM" or standin) else kind
            if kind == "VRAM" and standin:
                self.issues.append(
                    RegistrationIssue(
                        kind="VRAM",
                        error_class="NoGPU",
                        finding_id="agent-vram-untested",
                        message=f"no GPU visible (torch/cupy with CUDA not found): {len(idxs)} VRAM region(s) "
                        "registered as DRAM stand-ins; VRAM registration is not tested on this host",
                    )
                )
            if kind not in ("DRAM", "VRAM"):
                self.issues.append(
                    RegistrationIssue(
                        kind=kind,
                        error_class="Unsupported",
                        finding_id="agent-register-failed",
                        message=f"kvcheck cannot allocate {kind} regions",
                    )
                )
                continue
            sizes = [_align(self.layout.regions[i].item_len * pages) for i in idxs]
            total = sum(sizes)
            try:
                if reg_kind == "DRAM":
                    arena = np.empty(total + 2 * GUARD_BYTES + PAGE_ALIGN, dtype=np.uint8)
                    arena.fill(GUARD_BYTE)
                    lo = _align(arena.ctypes.data)
                    base = lo + GUARD_BYTES
                    # Regions zeroed now (every page touched, as a KV pool is: no page
                    # faults inside transfers); guard zones keep GUARD_BYTE.
                    arena[base - arena.ctypes.data : base - arena.ctypes.data + total] = 0
                    self.guards.append((lo, GUARD_BYTES))
                    self.guards.append((base + total, GUARD_BYTES))
                    dev_of = lambda i: dram_dev_id(i, standin)  # noqa: E731, B023  (called in this iteration)
                else:
                    arena, base = gpu[1](total, self.device)
                    dev_of = lambda i: self.device  # noqa: E731
            except Exception as exc:
                self.issues.append(
                    RegistrationIssue(
                        kind=kind,
                        error_class=error_class(exc),
                        finding_id="agent-alloc-failed",
                        message=f"cannot allocate {total} bytes of {reg_kind}: {exc}",
                    )
                )
                continue
            self._keep.append(arena)
            regs = []
            off = 0
            for i, size in zip(idxs, sizes, strict=False):
                item = self.layout.regions[i].item_len
                regs.append(
                    Registered(
                        index=i,
                        kind=kind,
                        reg_kind=reg_kind,
                        addr=base + off,
                        length=item * pages,
                        dev_id=dev_of(i),
                        item_len=item,
                        standin=standin,
                    )
                )
                off += size
            try:
                descs = self._agent.register_memory(
                    [(g.addr, g.length, g.dev_id, "") for g in regs], reg_kind, backends=[self.backend]
                )
            except Exception as exc:
                # The runtime: "NIXL memory registration failed for {kind} kv tensors".
                self.issues.append(
                    RegistrationIssue(
                        kind=kind,
                        error_class=error_class(exc),
                        finding_id="agent-register-failed",
                        message=f"NIXL memory registration failed for {kind} kv tensors: {error_class(exc)}: {exc}",
                    )
                )
                continue
            self._reg_descs.append(descs)
            self.regions.extend(regs)
        self.regions.sort(key=lambda g: g.index)

    @property
    def nixl(self):
        """The underlying ``nixl_agent`` (after ``start()``)."""
        return self._agent

    def metadata(self) -> bytes:
        """The agent's metadata blob, as published (fixed for the agent's life)."""
        if self._blob is None:
            raise RuntimeError("agent not started")
        return self._blob

    def listen_address(self) -> tuple[str, int] | None:
        """Where the metadata is served (the bound port when 0 was asked)."""
        if self._server is not None:
            return self._server.host, self._server.port
        return self.listen

    def poll_notifications(self) -> list[tuple[str, bytes]]:
        """New notifications from peers (``(peer name, message)``), also kept in ``notifications``."""
        new: list[tuple[str, bytes]] = []
        try:
            for peer, msgs in self._agent.get_new_notifs().items():
                new.extend((peer, m) for m in msgs)
        except Exception:
            return []
        self.notifications.extend(new)
        return new

    def serve(self, ttl: float, stop: threading.Event | None = None, on_notif=None) -> str:
        """Stay up until ``ttl`` seconds pass, ``stop`` is set, or SIGTERM/SIGINT arrives.

        Returns why it stopped: ``ttl``, ``stopped`` or ``signal``.
        """
        stop = stop or threading.Event()
        reason = {"why": "ttl"}

        def on_signal(signum, frame):
            reason["why"] = "signal"
            stop.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        deadline = time.monotonic() + ttl
        while not stop.is_set():
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                return "ttl"
            new = self.poll_notifications()  # also drives UCX progress (no progress thread)
            if new:
                self._mark_busy()
            for peer, msg in new:
                if on_notif:
                    on_notif(peer, msg)
            stop.wait(min(BUSY_POLL_S if now < self._busy_until else IDLE_POLL_S, left))
        return reason["why"] if reason["why"] == "signal" else "stopped"

    def close(self) -> None:
        """Withdraw the metadata (listener closed, etcd keys deleted) and deregister."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._agent is not None:
            if self._published_etcd and self.etcd:
                try:
                    self._agent.invalidate_local_metadata()
                except Exception:
                    pass
                try:  # NIXL deletes asynchronously; make sure before we exit.
                    from kvcheck.nixl.transport import EtcdGateway

                    EtcdGateway(self.etcd, timeout=2.0).delete_agent(self.name)
                except Exception:
                    pass
                self._published_etcd = False
            for descs in self._reg_descs:
                try:
                    self._agent.deregister_memory(descs, backends=[self.backend])
                except Exception:
                    pass
            self._reg_descs = []
        self._agent = None
        self._keep = []

    def summary(self) -> dict:
        """JSON-ready description: name, where published, regions per kind, issues, timings."""
        counts: dict[str, int] = {}
        for g in self.regions:
            counts[g.kind] = counts.get(g.kind, 0) + 1
        addr = self.listen_address()
        return {
            "name": self.name,
            "role": self.layout.role,
            "listen": f"{addr[0]}:{addr[1]}" if addr else None,
            "etcd": self.etcd,
            "backend": self.backend,
            "gpu": self.gpu_backend,
            "pages": self.layout.pages,
            "pid": os.getpid(),
            "regions": counts,
            "registered_bytes": sum(g.length for g in self.regions),
            "issues": [i.__dict__ for i in self.issues],
            "guards": [[a, n] for a, n in self.guards],
            "timings": self.timings,
        }
