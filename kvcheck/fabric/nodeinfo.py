"""What a node has (network interfaces, RDMA devices, GPUs and their PCI closeness) and
which UCX transport and device a connection actually used.

The transport comes from UCX itself: with ``UCX_LOG_LEVEL=debug`` UCX logs every
endpoint's lanes when it wires up (``wireup.c``: ``ep 0x..: lane[1]: 0:tcp/eth0.0 md[0]
-> ... rma_bw#1``); the ``rma_bw`` lanes carry NIXL's WRITE/READ (``ucp_put``/``ucp_get``),
the ``am`` lane its notifications. ``lanes_used(log)`` reads them back as
``transport/device`` (``tcp/eth0``, ``rc_mlx5/mlx5_0:1``, ``cuda_ipc/cuda``...).
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RDMA_TRANSPORTS = (
    "rc",
    "rc_v",
    "rc_x",
    "rc_mlx5",
    "rc_verbs",
    "dc",
    "dc_x",
    "dc_mlx5",
    "ud",
    "ud_v",
    "ud_x",
    "ud_mlx5",
    "ud_verbs",
    "ib",
    "srd",
)
_LANE = re.compile(r"lane\[(\d+)\]:\s+\d+:([A-Za-z0-9_]+)/(\S+?)\.\d+\s.*?((?:rma_bw#\d+|rma#\d+|am|amo)(?:\s|$).*)")


def lanes_used(log: str) -> dict[str, list[str]]:
    """``{"rma": [...], "am": [...]}``: the ``transport/device`` of the data (``rma_bw``)
    and active-message lanes in a UCX debug log, in first-seen order."""
    rma: dict[str, None] = {}
    am: dict[str, None] = {}
    for line in log.splitlines():
        if "lane[" not in line:
            continue
        m = _LANE.search(line)
        if not m:
            continue
        tl, dev, kinds = m.group(2), m.group(3), m.group(4)
        name = f"{tl}/{dev}"
        if "rma_bw#" in kinds:
            rma[name] = None
        if re.search(r"(^|\s)am(\s|$)", kinds):
            am[name] = None
    return {"rma": list(rma), "am": list(am)}


def transport_class(lane: str) -> str:
    """``rdma``, ``tcp``, ``cuda_ipc``, ``shm`` or ``other`` for a ``transport/device`` lane."""
    tl = lane.split("/", 1)[0]
    if tl in RDMA_TRANSPORTS or tl.startswith(("rc", "dc", "ud")):
        return "rdma"
    if tl == "tcp":
        return "tcp"
    if tl.startswith("cuda_ipc"):
        return "cuda_ipc"
    if tl in ("posix", "sysv", "cma", "knem", "xpmem", "self"):
        return "shm"
    return "other"


def asks_rdma(env: dict) -> bool:
    """True when the UCX environment asks for RDMA: ``UCX_TLS`` names a verbs transport
    (``rc``, ``dc``, ``ud``, their ``_x``/``_v``/``_mlx5`` forms, ``ib``), or
    ``UCX_NET_DEVICES`` names an HCA port (``mlx5_0:1``)."""
    tls = [t.strip().lstrip("^") for t in (env.get("UCX_TLS") or "").split(",") if t.strip()]
    if (env.get("UCX_TLS") or "").startswith("^"):
        tls = []
    if any(t in RDMA_TRANSPORTS or t.split("_")[0] in ("rc", "dc", "ud") for t in tls):
        return True
    return any(":" in d for d in (env.get("UCX_NET_DEVICES") or "").split(",") if d.strip())


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _ipv4(ifname: str) -> str | None:
    import fcntl

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def node_facts() -> dict:
    """This node's network interfaces (name, state, speed in Mb/s, IPv4), RDMA devices
    (ports: state, link layer, rate; the netdev each backs), GPUs (PCI bus id) and, per
    GPU, the RDMA devices closest on the PCI tree (``gpu_nic``)."""
    nets = []
    for d in sorted(Path("/sys/class/net").glob("*")):
        speed = _read(d / "speed")
        nets.append(
            {
                "name": d.name,
                "state": _read(d / "operstate"),
                "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
                "ipv4": _ipv4(d.name),
            }
        )
    rdma: list[dict[str, Any]] = []
    for d in sorted(Path("/sys/class/infiniband").glob("*")):
        ports = []
        for p in sorted((d / "ports").glob("*")):
            ports.append(
                {
                    "port": p.name,
                    "state": _read(p / "state"),
                    "link_layer": _read(p / "link_layer"),
                    "rate": _read(p / "rate"),
                }
            )
        netdevs = sorted(x.name for x in (d / "device" / "net").glob("*")) if (d / "device" / "net").exists() else []
        rdma.append({"name": d.name, "ports": ports, "netdevs": netdevs, "pci": os.path.realpath(d / "device")})
    gpus = []
    for g in sorted(Path("/proc/driver/nvidia/gpus").glob("*")):
        gpus.append({"bus_id": g.name, "pci": os.path.realpath(f"/sys/bus/pci/devices/{g.name.lower()}")})
    gpu_nic = {}
    for gpu in gpus:
        best: list[str] = []
        score = -1
        for r in rdma:
            common = len(os.path.commonpath([gpu["pci"], r["pci"]]).split("/"))
            if common > score:
                best, score = [r["name"]], common
            elif common == score:
                best.append(r["name"])
        gpu_nic[gpu["bus_id"]] = best
    return {
        "host": socket.gethostname(),
        "netdevs": nets,
        "rdma": [{k: v for k, v in r.items() if k != "pci"} for r in rdma],
        "gpus": [g["bus_id"] for g in gpus],
        "gpu_nic": gpu_nic,
    }


def default_listen_host(env: Mapping[str, str]) -> str:
    """The address peers reach this node on: the IPv4 of the first ``UCX_NET_DEVICES``
    netdev that has one, else the hostname's address, else 127.0.0.1."""
    for dev in (env.get("UCX_NET_DEVICES") or "").split(","):
        ip = _ipv4(dev.strip().split(":")[0]) if dev.strip() else None
        if ip:
            return ip
    try:
        ip = socket.gethostbyname(socket.gethostname())
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    return "127.0.0.1"


RDMA_ERROR_COUNTERS = (
    "local_ack_timeout_err",
    "packet_seq_err",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "implied_nak_seq_err",
    "req_transport_retries_exceeded",
    "roce_slow_restart",
)


def loss_counters() -> dict:
    """Counters that move when packets are lost: TCP ``OutSegs`` and ``RetransSegs``
    (``/proc/net/snmp``, this network namespace) and the sum of the RDMA ports'
    retransmission / sequence-error hardware counters (``hw_counters``)."""
    out = {"tcp_out": 0, "tcp_retrans": 0, "rdma_errors": 0}
    try:
        lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines() if ln.startswith("Tcp:")]
        if len(lines) >= 2:
            row = dict(zip(lines[0][1:], lines[1][1:], strict=False))
            out["tcp_out"], out["tcp_retrans"] = int(row.get("OutSegs", 0)), int(row.get("RetransSegs", 0))
    except (OSError, ValueError):
        pass
    for f in Path("/sys/class/infiniband").glob("*/ports/*/hw_counters/*"):
        if f.name in RDMA_ERROR_COUNTERS:
            v = _read(f)
            if v and v.isdigit():
                out["rdma_errors"] += int(v)
    return out


def counter_delta(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in before}
