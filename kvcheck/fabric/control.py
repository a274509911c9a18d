"""The fabric's control plane: keys in etcd, read and written over its v3 JSON gateway.

Everything lives under ``/kvcheck/fabric/<run>/`` (the agents' own NIXL metadata stays
under NIXL's ``/nixl/agents/``):

- ``assign/<node>``: what the coordinator asks a node to be (role, layout, environment);
- ``node/<node>``: what the node's worker reports once its agent is up (or why not);
- ``alive/<node>``: a counter the worker bumps every second (heartbeat);
- ``cmd/<node>``: the probe a prefill node is to run now (``seq`` and the job);
- ``result/<node>/<seq>``: that probe's result;
- ``stop``: set by the coordinator when the run ends.

Each call has its own deadline (``CALL_TIMEOUT_S``); ``UnreachableError`` when etcd
does not answer in time. The coordinator deletes the run's keys when it ends.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kvcheck.errors import UnreachableError
from kvcheck.nixl.transport import EtcdGateway

CALL_TIMEOUT_S = 3.0
ROOT = "/kvcheck/fabric"


class Control:
    """The keys of one run (``run``) in the etcd at ``endpoint`` (``http://HOST:PORT``)."""

    def __init__(self, endpoint: str, run: str, timeout: float = CALL_TIMEOUT_S):
        self.endpoint = endpoint.rstrip("/")
        self.run = run
        self.timeout = timeout
        self.prefix = f"{ROOT}/{run}/"

    def _gw(self) -> EtcdGateway:
        return EtcdGateway(self.endpoint, timeout=self.timeout)

    def key(self, *parts: str) -> bytes:
        return (self.prefix + "/".join(parts)).encode()

    def put(self, value, *parts: str) -> None:
        self._gw().put(self.key(*parts), json.dumps(value).encode())

    def get(self, *parts: str):
        raw = self._gw().get(self.key(*parts))
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def scan(self, *parts: str) -> dict[str, Any]:
        """Every key under ``parts`` (the rest of the key -> decoded JSON value)."""
        import base64

        gw = self._gw()
        prefix = self.key(*parts) + b"/"
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        out = gw._post("/v3/kv/range", {"key": gw._b64(prefix), "range_end": gw._b64(end)})
        found = {}
        for kv in out.get("kvs") or []:
            try:
                k = base64.b64decode(kv["key"]).decode()[len(prefix) :]
                found[k] = json.loads(base64.b64decode(kv.get("value", "")))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def clear(self) -> None:
        """Delete every key of the run."""
        gw = self._gw()
        prefix = self.prefix.encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        gw._post("/v3/kv/deleterange", {"key": gw._b64(prefix), "range_end": gw._b64(end)})


def wait_for(fn, deadline: float, every: float = 0.1):
    """Call ``fn()`` until it returns something truthy or ``deadline`` (monotonic) passes;
    the last value. ``UnreachableError`` from ``fn`` propagates."""
    value = fn()
    while not value and time.monotonic() < deadline:
        time.sleep(min(every, max(deadline - time.monotonic(), 0)))
        value = fn()
    return value


__all__ = ["Control", "UnreachableError", "wait_for"]
