"""Fabric checks (``kvcheck fabric -f DEPLOYMENT``): documentation and ids only.

Their findings come from ``kvcheck.fabric``, which runs one real kvcheck agent per node
and probes every prefill node -> decode node pair the rank mapping requires; the static
path never imports it, so these registered checks return nothing on their own.
"""

from __future__ import annotations

from kvcheck.checks.base import Severity, check
from kvcheck.fabric.findings import FIXES


def _doc(fid: str, severity: Severity, title: str, what: str, why: str) -> None:
    check(fid, severity, title, what=what, why=why, fix=FIXES[fid])(lambda chk, ctx: [])


_doc(
    "fabric-node-missing",
    Severity.ERROR,
    "Every node of the deployment joined the fabric probe",
    "A node whose worker never reported in etcd within --join-timeout.",
    "Its pairs cannot be probed: the node may be down, unschedulable, or cut off from etcd.",
)
_doc(
    "fabric-node-ucx",
    Severity.ERROR,
    "The node's UCX backend starts with its UCX_TLS / UCX_NET_DEVICES",
    "A node where NIXL's UCX backend cannot be created with the instance's UCX environment (a transport or device "
    "the node does not have).",
    "The server there creates the same backend at start-up and fails the same way.",
)
_doc(
    "fabric-registration-failed",
    Severity.ERROR,
    "The node registers every memory kind of its KV regions",
    "A node whose agent could not allocate or register a memory kind (VRAM/DRAM) of its instance's KV regions.",
    "The runtime raises 'NIXL memory registration failed for {kind} kv tensors' at start-up.",
)
_doc(
    "fabric-vram-untested",
    Severity.INFO,
    "VRAM was registered on a GPU",
    "A node without a visible GPU: its VRAM regions were registered as DRAM stand-ins.",
    "VRAM registration (GPUDirect RDMA) is not proven on that node.",
)
_doc(
    "fabric-agent-lost",
    Severity.ERROR,
    "Every node's agent stayed up during the run",
    "A node whose agent died or froze mid-run (heartbeat stopped, worker exited, or no result within the probe "
    "budget).",
    "The probes it was part of ended at their deadline; its later pairs were not probed.",
)
_doc(
    "fabric-etcd-lost",
    Severity.ERROR,
    "etcd answered for the whole run",
    "The etcd the fabric rendezvous through stopped answering.",
    "Metadata and probe commands go through it; the run ends at once (exit 3).",
)
_doc(
    "fabric-unreachable",
    Severity.ERROR,
    "Each required prefill node reaches each decode node",
    "A required pair whose probe could not reach the decode node's agent (connect or transfer timed out, retested).",
    "KV for requests routed over this pair would never arrive: the decode waits until its timeout.",
)
_doc(
    "fabric-probe-failed",
    Severity.ERROR,
    "The probe of each required pair succeeds",
    "A required pair whose probe failed at a named step (see kvcheck checks probe).",
    "The runtime's transfer over this pair would fail the same way.",
)
_doc(
    "fabric-data-mismatch",
    Severity.ERROR,
    "Bytes arrive intact on every pair",
    "A pair where bytes read back differ from those written.",
    "Silent KV corruption on that link.",
)
_doc(
    "fabric-tcp-fallback",
    Severity.ERROR,
    "RDMA where RDMA is asked for",
    "A pair whose KV moved over UCX's tcp transport although UCX_TLS / UCX_NET_DEVICES ask for verbs (or the node "
    "has RDMA devices and UCX_TLS is unset).",
    "UCX falls back silently: KV transfer is one to two orders of magnitude slower and TTFT collapses under load.",
)
_doc(
    "fabric-slow-link",
    Severity.ERROR,
    "No link is far below the others",
    "A pair whose best bandwidth is under --min-fraction of the median (or whose latency is over the median / "
    "--min-fraction), after ClusterKit-style retests.",
    "One slow or lossy link throttles every request routed over it.",
)
_doc(
    "fabric-lossy-link",
    Severity.WARNING,
    "No link loses packets",
    "A pair whose median probe saw TCP retransmissions over 1% of the segments sent (the prefill node's network "
    "namespace) or rising RDMA retransmission / sequence-error counters.",
    "A lossy link may still reach a fair bandwidth on a short probe, and then collapses under load (RTO backoff, "
    "go-back-N on RoCE).",
)
_doc(
    "fabric-nic-mismatch",
    Severity.WARNING,
    "UCX uses the NIC the deployment asks for",
    "A pair whose data lanes ran on another device than UCX_NET_DEVICES / --disaggregation-ib-device name, or than "
    "the NIC closest to the node's GPUs.",
    "Traffic crossing the PCIe/NUMA fabric to a far NIC, or every rank through one NIC, caps bandwidth.",
)
_doc(
    "fabric-nic-asymmetry",
    Severity.WARNING,
    "Nodes of one class have the same NICs and UCX settings",
    "A node whose interfaces, RDMA devices, UCX_TLS / UCX_NET_DEVICES, or data transport differ from the other nodes "
    "of its instance class.",
    "The odd node is the one that falls back, or fails, under load.",
)
_doc(
    "fabric-pair-not-probed",
    Severity.UNCHECKED,
    "Every required pair was probed",
    "A required pair not probed: its static plan is not one kvcheck probes (or the runtime would refuse it), its "
    "geometry is unknown, or the run ended first.",
    "kvcheck cannot say that link carries KV.",
)
_doc(
    "fabric-gpu-topology-unchecked",
    Severity.INFO,
    "The GPU-NIC topology was compared",
    "No node had a GPU: which NIC each GPU's KV leaves by was not compared with the NIC UCX used.",
    "Only a GPU node shows its PCIe topology.",
)
