"""The runtime kernel's driver: SGLang's disaggregation modules imported once, the
release the kernel is written against, and the recording stand-in for ``nixl_agent``
(every descriptor list the runtime prepares is recorded, never sent).
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from kvcheck.sglang.plan.model import RuntimeErrorPrediction, When

# Pages per region in the fake pools: small, since the dlists are built as numpy arrays.
NUM_SLOTS = 4
_PTR_BASE_SRC = 0x7F00_0000_0000
_PTR_BASE_DST = 0x7E00_0000_0000
_PTR_STRIDE = 1 << 32
_PEER_NAME = "kvcheck-decode"
_BOOTSTRAP_ADDR = "kvcheck.invalid:8998"

_lock = threading.Lock()


def raised(exc: BaseException, raised_by: str, when: When, operator_sees: str) -> RuntimeErrorPrediction:
    """The runtime's own verdict: the exception SGLang's code raised (``str(exc)`` as it
    prints), where it is raised and what the operator then sees."""
    return RuntimeErrorPrediction(
        type=type(exc).__name__, message=str(exc), raised_by=raised_by, when=when, operator_sees=operator_sees
    )


class KernelSetupError(RuntimeError):
    """The runtime kernel could not drive SGLang's code (not a predicted runtime error)."""


@lru_cache(maxsize=1)
def _sglang() -> SimpleNamespace:
    """Import the runtime's disaggregation modules once (slow: pulls torch)."""
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover - transformers is optional for the import
        pass
    import warnings

    _tolerate_reregistered_configs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sglang
        from sglang.srt.disaggregation.base import conn as base_conn
        from sglang.srt.disaggregation.common import conn as common_conn
        from sglang.srt.disaggregation.nixl import conn as nixl_conn
        from sglang.srt.disaggregation.utils import DisaggregationMode

    for name in ("sglang.srt.disaggregation.common.conn", "sglang.srt.disaggregation.nixl.conn"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return SimpleNamespace(
        version=getattr(sglang, "__version__", "unknown"),
        KVArgs=base_conn.KVArgs,
        base_conn=base_conn,
        common=common_conn,
        nixl=nixl_conn,
        PREFILL=DisaggregationMode.PREFILL,
        DECODE=DisaggregationMode.DECODE,
    )


def _tolerate_reregistered_configs() -> None:
    """Releases 0.5.12 .. 0.5.20 register Hugging Face configs (``qwen3_asr``, ...) that
    newer ``transformers`` ship themselves, and ``AutoConfig.register`` then refuses the
    import. Registering with ``exist_ok=True`` keeps transformers' own class; the PD code
    kvcheck drives never reads these configs."""
    try:
        from transformers import AutoConfig
    except Exception:  # pragma: no cover - transformers is optional for the import
        return
    register = AutoConfig.register
    if getattr(register, "_kvcheck_exist_ok", False):
        return

    def tolerant(model_type, config, exist_ok=False):
        return register(model_type, config, exist_ok=True)

    tolerant.__dict__["_kvcheck_exist_ok"] = True
    AutoConfig.register = staticmethod(tolerant)  # type: ignore[method-assign]


def runtime_version() -> str:
    """The installed SGLang's version (the kernel is written against ``SGLANG_VERSION``)."""
    return _sglang().version


# ---------------------------------------------------------------- transfer (prefill) --


class nixlNotFoundError(Exception):
    """What NIXL's ``prep_xfer_dlist`` raises (``str``: ``NIXL_ERR_NOT_FOUND``) when a
    descriptor of a local list lies in no memory region the agent registered."""


class _RecordingAgent:
    """Stand-in for ``nixl_agent``: records every prepared descriptor list.

    ``regions``: the (address, length) pairs this agent registered (the prefill's KV
    regions, ``register_buffer_to_engine``). A local list (``peer_name == ""``) given as
    plain ``(address, length, device)`` rows is checked the way NIXL's
    ``prepXferDlist`` checks it: every descriptor must lie inside one registered region,
    else ``nixlNotFoundError('NIXL_ERR_NOT_FOUND')`` (verified against nixl-cu12 1.5.1 in
    tests/test_incidents.py). Strided Nx5 runs (0.5.22 on) are recorded unchecked.
    """

    def __init__(self, name: str, regions: list[tuple[int, int]] | None = None):
        self.name = name
        self.prepared: list[tuple[str, Any, str, int]] = []  # (peer, Nx5 runs, kind, handle)
        self.remote_agents: list[bytes] = []
        self.regions = sorted(regions or [])

    def _check_local(self, descs) -> None:
        import bisect

        import numpy as np

        if not self.regions or not isinstance(descs, np.ndarray) or descs.ndim != 2 or descs.shape[1] != 3:
            return
        starts = [r[0] for r in self.regions]
        for addr, length in descs[:, :2].tolist():
            i = bisect.bisect_right(starts, addr) - 1
            if i < 0 or addr + length > self.regions[i][0] + self.regions[i][1]:
                raise nixlNotFoundError("NIXL_ERR_NOT_FOUND")

    def get_agent_metadata(self) -> bytes:
        return b"kvcheck-stand-in-agent-metadata:" + self.name.encode()

    def add_remote_agent(self, metadata: bytes) -> str:
        self.remote_agents.append(metadata)
        return _PEER_NAME

    def get_xfer_descs(self, descs, mem_kind: str):
        return descs

    def prep_xfer_dlist(self, peer_name: str, descs, mem_kind: str) -> int:
        if peer_name == "":
            self._check_local(descs)
        handle = len(self.prepared) + 1
        self.prepared.append((peer_name, descs, mem_kind, handle))
        return handle

    def kind_of(self, handle: int) -> str:
        return self.prepared[handle - 1][2]

    def runs_of(self, handle: int) -> list[list[int]]:
        return [list(map(int, r)) for r in self.prepared[handle - 1][1].tolist()]


class StopWorker(BaseException):
    """Ends a release's ``transfer_worker`` loop driven on a ``OneItemQueue`` (raised by the
    queue's second ``get``, outside the loop's ``except Exception``)."""


class OneItemQueue:
    """A stand-in for the worker's ``queue.Queue``: ``get`` hands out ``item`` once, then
    raises ``StopWorker``; ``put`` queues an item again."""

    def __init__(self, item: Any):
        self.items = [item]

    def get(self, *args: Any, **kwargs: Any) -> Any:
        if self.items:
            return self.items.pop()
        raise StopWorker

    def put(self, item: Any) -> None:
        self.items.append(item)


def _fake_ptrs(base: int, n: int) -> list[int]:
    return [base + i * _PTR_STRIDE for i in range(n)]
