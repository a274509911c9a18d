"""The node's own command outputs pasted with a log (``ibv_devices``, ``ulimit -a``): the
state the processes ran in. Each yields a ``rulebase.GenericFinding`` marked ``node``.
"""

from __future__ import annotations

import re

from kvcheck.explain.rulebase import GenericFinding

_IBV_HEADER = re.compile(r"^\s*device\s+node GUID\s*$")
_IBV_DASHES = re.compile(r"^\s*-{4,}\s+-{4,}\s*$")
_IBV_ROW = re.compile(r"^\s*\w+\s+[0-9a-f]{16}\s*$")
_MEMLOCK = re.compile(r"max locked memory\s+\(kbytes, -l\)\s+(?P<v>\d+|unlimited)")


class NodeState:
    """What a node's own commands, pasted with the log, show (bounded state): ``ibv_devices``
    listing no device, the locked-memory limit of ``ulimit -a``. Their findings are
    ``node`` findings: the state the processes ran in, before any of the log's lines."""

    def __init__(self) -> None:
        self.armed = 0  # line of an ibv_devices header whose rows are being read
        self._dashes = False
        self.memlock = ""  # KB, as ulimit printed it ('' = not shown)
        self._done: set[str] = set()

    def feed(self, lineno: int, line: str) -> GenericFinding | None:
        s = line.rstrip()
        if self.armed:
            if not self._dashes:
                self._dashes = bool(_IBV_DASHES.match(s))
                if not self._dashes:
                    self.armed = 0
                return None
            if not s.strip():
                return None
            rows_seen = bool(_IBV_ROW.match(s))
            head = self.armed
            self.armed, self._dashes = 0, False
            if rows_seen or "ibv_devices" in self._done:
                return None
            self._done.add("ibv_devices")
            return GenericFinding(
                id="rdma-devices-not-visible",
                title="ibv_devices lists no RDMA device on this node/container",
                engine="rdma",
                line=head,
                phase="startup",
                component="RDMA device discovery (node state)",
                text="ibv_devices: no device",
                node=True,
                cause="ibv_devices, run where the server runs, lists no RDMA device: the process has no RDMA NIC "
                "to use (the container does not get /dev/infiniband or the RDMA device plugin, or the host has "
                "none), so RDMA transfers (Mooncake RDMA, UCX rc/dc, GPUDirect RDMA) are impossible there and "
                "the transfer engine fails or falls back to TCP.",
                checks=[
                    "ls -l /dev/infiniband; ibv_devinfo (inside the container)",
                    "the pod/docker spec: --device /dev/infiniband, the RDMA device plugin resource, --privileged",
                    "lsmod | grep -E 'nvidia_peermem|nv_peer_mem' on the host (GPUDirect RDMA)",
                ],
                fix="Give the server's container the RDMA devices (and GPUDirect RDMA on the host), or use a "
                "transport meant for no RDMA.",
            )
        if _IBV_HEADER.match(s):
            self.armed, self._dashes = lineno, False
            return None
        m = _MEMLOCK.search(s)
        if m:
            v = m.group("v")
            if v != "unlimited":
                self.memlock = v
                if int(v) < 1 << 20 and "memlock" not in self._done:
                    self._done.add("memlock")
                    return GenericFinding(
                        id="rdma-memlock-limited",
                        title=f"max locked memory is {v} KB (not unlimited)",
                        engine="rdma",
                        line=lineno,
                        phase="startup",
                        component="locked-memory limit (node state)",
                        text=s.strip()[:300],
                        node=True,
                        cause=f"The process may lock only {v} KB: RDMA registrations and verbs objects (CQs, QPs) "
                        "pin memory against this limit, and KV pools need far more; creating them fails with "
                        "ENOMEM (Cannot allocate memory).",
                        checks=[
                            "ulimit -l in the server's container",
                            "docker run --ulimit memlock=-1 / the pod's limits",
                        ],
                        fix="Set the locked-memory limit to unlimited for the server (docker --ulimit memlock=-1, "
                        "limits.conf memlock unlimited, systemd LimitMEMLOCK=infinity).",
                    )
        return None
