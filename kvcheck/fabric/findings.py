"""What a fabric run found: named findings per node and per pair (ids registered in
``kvcheck.checks.fabric``), and the matrix cells."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from kvcheck.checks.base import Finding, Severity
from kvcheck.fabric.nodeinfo import asks_rdma, transport_class

FIXES = {
    "fabric-node-missing": "start the node's worker (the --emit k8s Job / srun line) and check it reaches etcd; "
    "raise --join-timeout for slow schedulers",
    "fabric-node-ucx": "fix UCX_TLS / UCX_NET_DEVICES on that node (ucx_info -d lists the transports and devices it "
    "has); the server there would fail the same way",
    "fabric-registration-failed": "the runtime would fail with 'NIXL memory registration failed': check the GPU "
    "driver, ulimit -l, nvidia-peermem / dma-buf, UCX memory types",
    "fabric-vram-untested": "run the fabric workers on the GPU nodes (torch or cupy installed) to register and probe "
    "VRAM",
    "fabric-agent-lost": "the node's agent died or froze during the run: check the node (OOM, cgroup freezer, "
    "debugger), then rerun",
    "fabric-etcd-lost": "etcd stopped answering: check the etcd endpoint (--etcd) and rerun; the workers stop on "
    "their own",
    "fabric-unreachable": "the prefill node cannot reach the decode node's agent: check routes, firewalls / security "
    "groups, and that UCX_NET_DEVICES names an interface on the same fabric",
    "fabric-probe-failed": "see the message: the probe names the step that failed",
    "fabric-data-mismatch": "bytes did not arrive intact on this link: check the NIC/cable, UCX_TLS, and rerun with "
    "UCX_LOG_LEVEL=info",
    "fabric-tcp-fallback": "UCX moved KV over TCP although RDMA was asked for: check the HCA is up (ibv_devinfo), "
    "UCX_NET_DEVICES names it (mlx5_X:1), and rdma/verbs devices are passed to the pod",
    "fabric-slow-link": "check this link (port speed, errors on the switch port, congestion, netem/QoS); compare "
    "with ib_write_bw / iperf on the same pair",
    "fabric-lossy-link": "packets are being lost on this link: check the cable/transceiver, switch port error "
    "counters, MTU mismatches and PFC/ECN settings",
    "fabric-nic-mismatch": "set UCX_NET_DEVICES (or --disaggregation-ib-device) to the NIC this node should use, the "
    "one next to its GPUs",
    "fabric-nic-asymmetry": "make the node's NICs, RDMA devices and UCX settings match the other nodes of its "
    "instance class",
    "fabric-pair-not-probed": "fix the static findings of this pair first (kvcheck preflight -f): the probe follows "
    "the plan the runtime would take",
    "fabric-gpu-topology-unchecked": "run on the GPU nodes to compare the NIC UCX uses with the NIC closest to each "
    "GPU",
}


def _f(fid: str, severity: Severity, message: str) -> Finding:
    return Finding(id=fid, severity=severity, message=message, fix=FIXES[fid])


@dataclass
class Scoped:
    """A finding about ``nodes`` (one) or a ``pair``."""

    finding: Finding
    node: str | None = None
    pair: tuple[str, str] | None = None

    def contract(self) -> dict:
        out = self.finding.contract()
        out["node"] = self.node
        out["pair"] = list(self.pair) if self.pair else None
        return out


def _data_lanes(result: dict) -> list[str]:
    lanes = [x for x in (result.get("lanes") or {}).get("rma", []) if not x.endswith("/lo")]
    return lanes or (result.get("lanes") or {}).get("rma", [])


def cell(run, pair) -> dict:
    """One matrix cell: status, reached, bytes checked, bandwidth, latency, lanes."""
    from kvcheck.fabric.coordinator import metrics

    rec = run.pairs[pair]
    good = rec.good
    best = max(good, key=lambda a: metrics(a)[0] or 0) if good else rec.last()
    bw, lat = rec.bandwidth(), rec.latency()
    return {
        "prefill": pair[0],
        "decode": pair[1],
        "status": rec.status,
        "reached": bool(good),
        "attempts": len(rec.attempts),
        "bytes_checked": metrics(best)[2] if best else 0,
        "bandwidth_Bps": bw,
        "latency_s": lat,
        "transport": sorted({transport_class(x) for x in _data_lanes(best)}) if best else [],
        "lanes": _data_lanes(best) if best else [],
        "why": rec.why or ("; ".join(f["message"] for f in (best or {}).get("findings", []))[:400] if not good else ""),
    }


LATENCY_FLOOR_S = 1e-3


def judge(run, plan, *, min_fraction: float = 0.5, latency_floor: float = LATENCY_FLOOR_S) -> list[Scoped]:
    """Every finding of ``run`` (``kvcheck.fabric.coordinator.FabricRun``). A latency is
    named only when it is also ``latency_floor`` seconds over the median: the ping is a
    one-page NIXL WRITE timed from Python (polling), whose own jitter is of that order."""
    out: list[Scoped] = []
    if run.etcd_lost:
        out.append(
            Scoped(
                _f(
                    "fabric-etcd-lost",
                    Severity.ERROR,
                    f"etcd stopped answering mid-run ({run.etcd_lost}); pairs not yet probed are left unprobed",
                )
            )
        )
    lost_pairs_nodes = set()
    for name, node in plan.nodes.items():
        rec = run.nodes.get(name)
        if node.layout is None:
            out.append(
                Scoped(
                    _f(
                        "fabric-pair-not-probed",
                        Severity.UNCHECKED,
                        f"node {name}: kvcheck cannot derive its KV geometry (class {node.class_id}); its pairs are "
                        "not probed",
                    ),
                    node=name,
                )
            )
            continue
        if rec is None:
            why = run.lost.get(name, f"no worker reported within the join timeout ({run.options.join_timeout:g} s)")
            out.append(Scoped(_f("fabric-node-missing", Severity.ERROR, f"node {name} never joined: {why}"), node=name))
            lost_pairs_nodes.add(name)
            continue
        env = rec.get("env") or {}
        tls, dev = env.get("UCX_TLS", "(unset)"), env.get("UCX_NET_DEVICES", "(unset)")
        if rec.get("status") == "failed":
            errs = "; ".join(rec.get("ucx_log") or [])[:300]
            out.append(
                Scoped(
                    _f(
                        "fabric-node-ucx",
                        Severity.ERROR,
                        f"node {name}: the UCX backend cannot start with UCX_TLS={tls} UCX_NET_DEVICES={dev}: "
                        f"{rec.get('error')}" + (f" (UCX: {errs})" if errs else ""),
                    ),
                    node=name,
                )
            )
            lost_pairs_nodes.add(name)
            continue
        for issue in rec.get("issues") or []:
            if issue["finding_id"] == "agent-vram-untested":
                out.append(
                    Scoped(_f("fabric-vram-untested", Severity.INFO, f"node {name}: {issue['message']}"), node=name)
                )
            else:
                out.append(
                    Scoped(
                        _f("fabric-registration-failed", Severity.ERROR, f"node {name}: {issue['message']}"), node=name
                    )
                )
                lost_pairs_nodes.add(name)
        if run.guards.get(name) is False:
            out.append(
                Scoped(
                    _f(
                        "fabric-data-mismatch",
                        Severity.ERROR,
                        f"node {name}: a guard zone around its KV regions was written: a transfer wrote outside the "
                        "regions it targets",
                    ),
                    node=name,
                )
            )
        if name in run.lost:
            out.append(
                Scoped(
                    _f(
                        "fabric-agent-lost",
                        Severity.ERROR,
                        f"node {name} {run.lost[name]}; its remaining pairs were not probed",
                    ),
                    node=name,
                )
            )
            lost_pairs_nodes.add(name)
    oks = {p: r for p, r in run.pairs.items() if r.status == "ok"}
    bws = [r.bandwidth() for r in oks.values() if r.bandwidth()]
    lats = [r.latency() for r in oks.values() if r.latency()]
    med_bw = statistics.median(bws) if len(bws) >= 3 else None
    med_lat = statistics.median(lats) if len(lats) >= 3 else None
    for pair, rec in run.pairs.items():
        p, d = pair
        if rec.status == "skipped":
            out.append(Scoped(_f("fabric-pair-not-probed", Severity.UNCHECKED, f"{p} -> {d}: {rec.why}"), pair=pair))
            continue
        if rec.status == "not-probed":
            if (
                not (lost_pairs_nodes & set(pair))
                and not run.etcd_lost
                and not any(plan.nodes[n].layout is None for n in pair)
            ):
                bad = [n for n in pair if (run.nodes.get(n) or {}).get("status") not in ("ready", None)]
                why = (
                    f"node {', '.join(bad)} is not ready"
                    if bad
                    else ("the run's deadline passed" if run.deadline_hit else "not reached")
                )
                out.append(
                    Scoped(
                        _f("fabric-pair-not-probed", Severity.UNCHECKED, f"{p} -> {d}: not probed ({why})"), pair=pair
                    )
                )
            continue
        if rec.status == "failed":
            last = rec.last() or {}
            ids = [f["id"] for f in last.get("findings", [])]
            msg = "; ".join(f["message"] for f in last.get("findings", []))[:500]
            if last.get("lost") or (set(pair) & set(run.lost)):
                continue  # said once, on the node
            if "probe-data-mismatch" in ids:
                out.append(Scoped(_f("fabric-data-mismatch", Severity.ERROR, f"{p} -> {d}: {msg}"), pair=pair))
            elif set(ids) & {"probe-timeout", "probe-peer-lost", "probe-unreachable"}:
                out.append(
                    Scoped(
                        _f(
                            "fabric-unreachable",
                            Severity.ERROR,
                            f"{p} -> {d}: unreachable after {len(rec.attempts)} attempt(s): {msg}",
                        ),
                        pair=pair,
                    )
                )
            else:
                out.append(Scoped(_f("fabric-probe-failed", Severity.ERROR, f"{p} -> {d}: {msg}"), pair=pair))
            continue
        best = cell(run, pair)
        node_env = {**plan.nodes[p].env, **((run.nodes.get(p) or {}).get("env") or {})}
        facts = (run.nodes.get(p) or {}).get("facts") or {}
        has_rdma = bool(facts.get("rdma"))
        dep_env = plan.nodes[p].env
        if (
            "tcp" in best["transport"]
            and "rdma" not in best["transport"]
            and (asks_rdma(dep_env) or asks_rdma(node_env) or (has_rdma and not node_env.get("UCX_TLS")))
        ):
            asked_by = (
                f"the deployment's UCX_TLS={dep_env.get('UCX_TLS')} "
                f"UCX_NET_DEVICES={dep_env.get('UCX_NET_DEVICES', '(unset)')}"
                if asks_rdma(dep_env)
                else f"the node's UCX_TLS={node_env.get('UCX_TLS')}"
                if asks_rdma(node_env)
                else "the node has RDMA devices and UCX_TLS is unset, which"
            )
            out.append(
                Scoped(
                    _f(
                        "fabric-tcp-fallback",
                        Severity.ERROR,
                        f"{p} -> {d}: KV moved over {', '.join(best['lanes'])} although {asked_by} asks for RDMA"
                        + (
                            f" (the node runs UCX_TLS={node_env.get('UCX_TLS')})"
                            if node_env.get("UCX_TLS") != dep_env.get("UCX_TLS")
                            else ""
                        ),
                    ),
                    pair=pair,
                )
            )
        asked = plan.nodes[p].asked_devices
        if asked and best["lanes"]:
            used = {x.split("/", 1)[1] for x in best["lanes"]}
            want = {a.strip() for a in asked} | {a.split(":")[0] for a in asked}
            if not used & want:
                out.append(
                    Scoped(
                        _f(
                            "fabric-nic-mismatch",
                            Severity.WARNING,
                            f"{p} -> {d}: UCX used {sorted(used)}, {plan.nodes[p].asked_source} asks for {asked}",
                        ),
                        pair=pair,
                    )
                )
        gnic = facts.get("gpu_nic") or {}
        if gnic and best["lanes"]:
            near = {n for v in gnic.values() for n in v}
            used = {x.split("/", 1)[1].split(":")[0] for x in best["lanes"]}
            if near and not used & near:
                out.append(
                    Scoped(
                        _f(
                            "fabric-nic-mismatch",
                            Severity.WARNING,
                            f"{p} -> {d}: UCX used {sorted(used)}; the NICs closest to the node's GPUs are "
                            f"{sorted(near)}",
                        ),
                        pair=pair,
                    )
                )
        bw, lat = rec.bandwidth(), rec.latency()
        slow = []
        if med_bw and bw and bw < min_fraction * med_bw:
            slow.append(f"bandwidth {bw / 1e6:.1f} MB/s is {bw / med_bw:.0%} of the median {med_bw / 1e6:.1f} MB/s")
        if med_lat and lat and lat > med_lat / min_fraction and lat - med_lat > latency_floor:
            slow.append(f"latency {lat * 1e3:.2f} ms is {lat / med_lat:.1f}x the median {med_lat * 1e3:.2f} ms")
        lossy = _loss(rec)
        if lossy:
            out.append(Scoped(_f("fabric-lossy-link", Severity.WARNING, f"{p} -> {d}: {lossy}"), pair=pair))
        if slow:
            out.append(
                Scoped(
                    _f(
                        "fabric-slow-link",
                        Severity.ERROR,
                        f"{p} -> {d}: {'; '.join(slow)} (best of {len(rec.attempts)} attempt(s); --min-fraction "
                        f"{min_fraction:g})",
                    ),
                    pair=pair,
                )
            )
    out.extend(_asymmetry(run, plan))
    if not any((r or {}).get("facts", {}).get("gpus") for r in run.nodes.values()):
        out.append(
            Scoped(
                _f(
                    "fabric-gpu-topology-unchecked",
                    Severity.INFO,
                    "no node has a GPU: the GPU-NIC topology (which NIC each GPU's KV leaves by) was not compared",
                )
            )
        )
    return out


LOSS_SHARE = 0.01


def _loss(rec) -> str | None:
    """Why the pair's link loses packets, when the median attempt saw TCP retransmissions
    over ``LOSS_SHARE`` of the segments sent (in the prefill node's network namespace) or
    every attempt saw RDMA retransmission / sequence errors; None otherwise."""
    shares, rdma = [], []
    for a in rec.attempts:
        c = a.get("counters") or {}
        sent, re_ = c.get("tcp_out", 0), c.get("tcp_retrans", 0)
        shares.append(re_ / sent if sent > 0 else 0.0)
        rdma.append(c.get("rdma_errors", 0))
    if not shares:
        return None
    if statistics.median(shares) > LOSS_SHARE:
        return (
            f"TCP retransmitted {min(shares):.1%} to {max(shares):.1%} of the segments it sent during the "
            f"{len(shares)} probe(s)"
        )
    if min(rdma) > 0:
        return (
            f"RDMA retransmission / sequence-error counters rose by {min(rdma)} or more during each of "
            f"{len(rdma)} probe(s)"
        )
    return None


def _signature(rec: dict) -> tuple:
    facts = rec.get("facts") or {}
    env = rec.get("env") or {}
    nets = tuple(sorted(n["name"] for n in facts.get("netdevs", []) if n["name"] != "lo" and n.get("state") == "up"))
    rdma = tuple(
        sorted((r["name"], tuple(p.get("state") or "" for p in r.get("ports", []))) for r in facts.get("rdma", []))
    )
    return (nets, rdma, env.get("UCX_TLS"), env.get("UCX_NET_DEVICES"))


def _asymmetry(run, plan) -> list[Scoped]:
    """Nodes of one instance class whose NICs, RDMA devices or UCX settings differ from
    the class's majority, or whose data lanes differ from their class's."""
    out = []
    by_class: dict[str, list[str]] = {}
    for n, node in plan.nodes.items():
        if run.nodes.get(n):
            by_class.setdefault(node.class_id or node.role, []).append(n)
    lanes_of: dict[str, set] = {}
    for (p, _d), rec in run.pairs.items():
        for a in rec.good:
            lanes_of.setdefault(p, set()).update(x.split("/")[0] for x in _data_lanes(a))
    for cls, members in by_class.items():
        if len(members) < 2:
            continue
        sigs = {n: _signature(run.nodes[n]) for n in members}
        counts: dict[tuple, int] = {}
        for s in sigs.values():
            counts[s] = counts.get(s, 0) + 1
        major = max(counts, key=counts.__getitem__)
        if counts[major] * 2 > len(members):
            for n, s in sigs.items():
                if s != major:
                    diff = [
                        label
                        for label, a, b in zip(
                            ("interfaces", "RDMA devices", "UCX_TLS", "UCX_NET_DEVICES"), s, major, strict=False
                        )
                        if a != b
                    ]
                    keys = ("interfaces", "rdma", "UCX_TLS", "UCX_NET_DEVICES")
                    mine, theirs = dict(zip(keys, s, strict=False)), dict(zip(keys, major, strict=False))
                    out.append(
                        Scoped(
                            _f(
                                "fabric-nic-asymmetry",
                                Severity.WARNING,
                                f"node {n} differs from the other {cls} nodes in {', '.join(diff)}: {mine} vs {theirs}",
                            ),
                            node=n,
                        )
                    )
        tl = {n: frozenset(lanes_of[n]) for n in members if n in lanes_of}
        if len(set(tl.values())) > 1:
            tcount: dict = {}
            for v in tl.values():
                tcount[v] = tcount.get(v, 0) + 1
            major_t = max(tcount, key=tcount.__getitem__)
            for n, v in tl.items():
                if v != major_t and tcount[major_t] * 2 > len(tl):
                    out.append(
                        Scoped(
                            _f(
                                "fabric-nic-asymmetry",
                                Severity.WARNING,
                                f"node {n} moves KV over {sorted(v)}, the other {cls} nodes over {sorted(major_t)}",
                            ),
                            node=n,
                        )
                    )
    return out
