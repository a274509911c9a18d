"""``preflight --probe`` on a Mooncake pair: real writes with Mooncake's own
``TransferEngine`` from a prefill-role engine started here into a kvcheck Mooncake agent of
the decode role (``kvcheck agent --backend mooncake``), along every write of the plan.

The writes are the plan's own (``kvcheck.sglang.mooncake.simulate_writes``: the send path
SGLang's transfer worker takes for this pair, for prefill rank 0 and its first decode rank),
repeated for every page both sides registered. The probe runs in a child process (the
engine's threads and logs stay out of kvcheck's process; the parent kills it at its
deadline). Safety, as for the NIXL probe: the decode agent is confirmed first (kvcheck's
magic on its listener, and its regions must be the decode geometry the plan was made for);
only addresses inside those confirmed regions are written; the prefill side writes from its
own buffers; every wait has a deadline. The bytes are checked by SHA-256 digests the agent
computes of its own regions, and its guard zones must still be intact.

The result says which protocol moved the bytes (``tcp`` here; ``rdma`` where the nodes have
HCAs) and warns (``probe-tcp-fallback``) when a side asks for RDMA (``MOONCAKE_PROTOCOL``,
default ``rdma``) but its node has no RDMA device, so Mooncake would use TCP.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from kvcheck.checks.base import Finding, Severity

CHILD_GRACE_S = 20.0


def _finding(fid: str, message: str, severity: Severity = Severity.ERROR, fix: str = "") -> Finding:
    return Finding(
        id=fid, severity=severity, message=message, fix=fix or "See the message; rerun the probe once fixed."
    )


def fetch_agent(target: str, timeout: float) -> dict:
    """The agent's self-description (``GET /kvcheck/mooncake``); raises on anything else."""
    import httpx

    r = httpx.get(f"http://{target}/kvcheck/mooncake", timeout=timeout)
    r.raise_for_status()
    data = r.json()
    from kvcheck.mooncake.engine import MAGIC

    if not isinstance(data, dict) or data.get("magic") != MAGIC:
        raise ValueError(f"{target} is not a kvcheck Mooncake agent")
    return data


def confirm_regions(agent: dict, geometry) -> str | None:
    """Why the agent's regions are not the ones the plan writes into, or None."""
    regs = agent.get("regions") or []
    if len(regs) != geometry.n:
        return f"the agent registered {len(regs)} regions, the decode geometry has {geometry.n}"
    for r, g in zip(regs, geometry.regions, strict=True):
        if r.get("item_len") != g.item_len or r.get("layer_id") != g.layer_id or r.get("part") != g.part:
            return (
                f"agent region {r.get('index')} (item length {r.get('item_len')}) is not decode region {g.index} "
                f"(item length {g.item_len})"
            )
        if not isinstance(r.get("addr"), int) or not isinstance(r.get("bytes"), int) or r["bytes"] < g.item_len:
            return f"agent region {r.get('index')} has no usable address or size"
    return None


def planned_writes(prefill, decode, pages: int, total_kv_heads: int | None, release: str | None) -> list[list[int]]:
    """``[src region, src offset, dst region, dst offset, length]`` for every page the probe
    writes: the plan's writes for page 1 -> 2, moved to page k -> k for k < ``pages``."""
    from kvcheck.sglang import mooncake as mc

    w = mc.simulate_writes(
        prefill, decode, pp_rank=0, total_kv_heads=total_kv_heads, src_rank=0, dst_rank=0, b=mc.behaviour(release)
    )
    out = []
    for s, d, n in w.writes:
        i, soff = divmod(s - mc.SRC_BASE, mc.STRIDE)
        j, doff = divmod(d - mc.DST_BASE, mc.STRIDE)
        si, di = prefill.regions[i].item_len, decode.regions[j].item_len
        for k in range(pages):
            out.append([i, soff - mc.SRC_PAGE * si + k * si, j, doff - mc.DST_PAGE * di + k * di, n])
    return out


def run_probe(job: dict, timeout: float, python: str | None = None) -> dict:
    """Run the probe child on ``job``; its JSON result, or ``{"error": ...}`` on a deadline."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-m", "kvcheck.mooncake.probe"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=timeout + CHILD_GRACE_S,
            env={**os.environ, "GLOG_minloglevel": os.environ.get("GLOG_minloglevel", "2")},
        )
    except subprocess.TimeoutExpired:
        return {
            "error": "timeout",
            "step": "probe child",
            "message": f"the probe did not finish in {timeout + CHILD_GRACE_S:g} s",
        }
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {
            "error": "probe-error",
            "message": f"the probe child exited {proc.returncode} without a result: {proc.stderr[-500:]}",
        }
    return json.loads(lines[-1])


def _write_by(deadline: float, write: Callable[[], int]) -> tuple[int | None, float]:
    """Run ``write`` (a blocking ``batch_transfer_sync_write``) in a daemon thread and wait
    for it until ``deadline`` (``time.monotonic()``; at least 0.1 s). Returns (its return
    code, or None when it has not returned by then; the seconds waited). Raises
    ``IndexError`` when the write raised instead of returning."""
    result: list[int] = []
    th = threading.Thread(target=lambda: result.append(write()), daemon=True)
    t0 = time.perf_counter()
    th.start()
    th.join(max(0.1, deadline - time.monotonic()))
    seconds = time.perf_counter() - t0
    return (None if th.is_alive() else result[0]), seconds


def _child(job: dict) -> dict:
    """In the child: engine, source buffers, writes, digests."""
    from kvcheck.mooncake.engine import Arena, start_engine

    deadline = time.monotonic() + job["timeout"]
    try:
        agent = fetch_agent(job["target"], job["timeout"])
    except Exception as exc:
        return {"error": "probe-unreachable", "message": f"decode agent {job['target']}: {exc}"}
    regions = agent["regions"]
    if [r["item_len"] for r in regions] != job["dst_item_lens"]:
        return {
            "error": "probe-remote-unregistered",
            "message": "the decode agent's regions changed since they were confirmed",
        }
    for _si, _soff, dj, doff, n in job["writes"]:
        if not (0 <= dj < len(regions) and 0 <= doff and doff + n <= regions[dj]["bytes"]):
            return {
                "error": "probe-unconfirmed-region",
                "message": f"a planned write [{doff}, {doff + n}) falls outside confirmed decode region {dj}",
            }
    arena = Arena([x * job["pages"] for x in job["src_item_lens"]], job["src_item_lens"])
    # the metadata exchange the agent (and so the deployment) uses: P2P handshake or a server
    engine, session, info = start_engine(
        job.get("host", "127.0.0.1"),
        job["protocol"],
        job.get("device", ""),
        metadata=agent.get("metadata") or "P2PHANDSHAKE",
        timeout=max(1.0, deadline - time.monotonic()),
    )
    if arena.register(engine) != 0:
        return {
            "error": "probe-registration-failed",
            "message": "batch_register_memory of the prefill regions failed",
            **info,
        }
    nonce = os.urandom(8)
    for k in range(len(arena.regions)):
        arena.fill(k, nonce + k.to_bytes(4, "little"))
    srcs = [arena.addr(si, soff) for si, soff, _, _, _ in job["writes"]]
    dsts = [regions[dj]["addr"] + doff for _, _, dj, doff, _ in job["writes"]]
    lens = [n for *_, n in job["writes"]]
    # The first write to a session opens it (P2P handshake, the peer's segment
    # descriptor): timed apart, so that the bandwidth is the KV writes' own.
    first, connect_s = _write_by(
        deadline, lambda: engine.batch_transfer_sync_write(agent["session_id"], srcs[:1], dsts[:1], lens[:1])
    )
    if first is None:
        return {
            "error": "probe-timeout",
            "message": f"the first write to {agent['session_id']} did not return in {job['timeout']:g} s (session "
            "open)",
            **info,
        }
    if first != 0:
        return {
            "error": "probe-error",
            "message": f"Mooncake could not open session {agent['session_id']} (first write returned {first})",
            **info,
        }
    ret, seconds = _write_by(deadline, lambda: engine.batch_transfer_sync_write(agent["session_id"], srcs, dsts, lens))
    if ret is None:
        return {
            "error": "probe-timeout",
            "message": f"batch_transfer_sync_write to {agent['session_id']} did not return in {job['timeout']:g} s",
            **info,
        }
    total = sum(lens)
    base = {
        **info,
        "session_id": agent["session_id"],
        "agent_protocol": agent.get("protocol"),
        "agent_protocol_requested": agent.get("protocol_requested"),
        "writes": len(lens),
        "bytes": total,
        "seconds": round(seconds, 6),
        "connect_seconds": round(connect_s, 6),
        "gbps": round(total * 8 / seconds / 1e9, 3) if seconds > 0 else None,
    }
    if ret != 0:
        return {
            "error": "probe-error",
            "message": f"Mooncake batch_transfer_sync_write returned {ret} (the runtime then fails the "
            "request: 'Failed to send kv chunk')",
            **base,
        }
    import httpx

    spans = [[dj, doff, n] for _, _, dj, doff, n in job["writes"]]
    try:
        r = httpx.post(
            f"http://{job['target']}/kvcheck/mooncake/digest",
            json={"spans": spans},
            timeout=max(0.5, deadline - time.monotonic()),
        )
        r.raise_for_status()
        remote = r.json()
    except Exception as exc:
        return {
            "error": "probe-peer-lost",
            "message": f"decode agent {job['target']} did not return the digests: {exc}",
            **base,
        }
    mine = [hashlib.sha256(arena.span(si, soff, n)).hexdigest() for si, soff, _, _, n in job["writes"]]
    bad = [k for k, (a, b) in enumerate(zip(mine, remote.get("digests") or [], strict=False)) if a != b]
    if len(remote.get("digests") or []) != len(mine):
        bad = list(range(len(mine)))
    arena.unregister(engine)
    out = {**base, "mismatched": len(bad), "guards_intact": remote.get("guards_intact")}
    if bad:
        k = bad[0]
        out.update(
            error="probe-data-mismatch",
            message=f"{len(bad)} of {len(mine)} writes arrived with other bytes (first: prefill region "
            f"{job['writes'][k][0]} -> decode region {job['writes'][k][2]})",
        )
    elif not remote.get("guards_intact"):
        out.update(error="probe-data-mismatch", message="the decode agent's guard zones were overwritten")
    return out


def augment_preflight(
    report, prefill_side, decode_side, *, decode_agent: str | None, probe: bool, timeout: float, pages: int
) -> None:
    """Confirm the decode agent and (``probe``) write along the plan; findings join the report."""
    from kvcheck.report.model import verdict_of
    from kvcheck.sglang.geometry import derive_geometry

    new: list[Finding] = []
    if not decode_agent:
        new.append(
            _finding(
                "probe-skipped",
                "--probe on a Mooncake pair needs --decode-agent HOST:PORT (kvcheck agent --backend mooncake --role "
                "decode)",
                Severity.UNCHECKED,
            )
        )
    else:
        pg, dg = derive_geometry(prefill_side), derive_geometry(decode_side)
        try:
            agent = fetch_agent(decode_agent, timeout)
        except Exception as exc:
            new.append(_finding("probe-unreachable", f"decode agent {decode_agent}: {exc}", Severity.UNCHECKED))
            agent = None
        if agent is not None:
            why = confirm_regions(agent, dg)
            report.extra["agents"] = {
                "decode": {k: agent.get(k) for k in ("name", "session_id", "protocol", "protocol_requested", "hcas")}
            }
            if why:
                new.append(_finding("agent-geometry", f"decode agent {decode_agent}: {why}"))
            elif probe:
                heads = prefill_side.model.num_key_value_heads if prefill_side.model.attention == "MHA" else None
                plan = report.plan
                if plan is None or plan.error is not None or plan.path in (None, "not_modeled", "nothing_to_transfer"):
                    new.append(
                        _finding(
                            "probe-skipped", "the plan has no transfer to probe (see the findings above)", Severity.INFO
                        )
                    )
                else:
                    n = max(1, min(pages, int(agent.get("pages") or 1)))
                    writes = planned_writes(pg, dg, n, heads, prefill_side.sglang_version)
                    proto = prefill_side.env.get("MOONCAKE_PROTOCOL", "rdma").lower()
                    job = {
                        "target": decode_agent,
                        "timeout": timeout,
                        "pages": n,
                        "writes": writes,
                        "protocol": proto,
                        "src_item_lens": pg.item_lens,
                        "dst_item_lens": dg.item_lens,
                    }
                    res = run_probe(job, timeout)
                    report.extra["probe"] = {"backend": "mooncake", **{k: v for k, v in res.items() if k != "message"}}
                    if res.get("error"):
                        sev = (
                            Severity.UNCHECKED
                            if res["error"] in ("probe-unreachable", "timeout", "probe-timeout")
                            else Severity.ERROR
                        )
                        new.append(
                            _finding(
                                res["error"] if res["error"] != "timeout" else "probe-timeout",
                                res.get("message", ""),
                                sev,
                            )
                        )
                    else:
                        new.append(
                            _finding(
                                "probe-ok",
                                f"{res['writes']} writes, {res['bytes']} bytes over Mooncake {res['protocol']} "
                                f"in {res['seconds'] * 1e3:.1f} ms ({res['gbps']} Gbit/s), every byte verified",
                                Severity.INFO,
                            )
                        )
                    for role, asked, used in (
                        ("prefill", res.get("protocol_requested"), res.get("protocol")),
                        ("decode", res.get("agent_protocol_requested"), res.get("agent_protocol")),
                    ):
                        if asked == "rdma" and used == "tcp":
                            new.append(
                                _finding(
                                    "probe-tcp-fallback",
                                    f"{role}: MOONCAKE_PROTOCOL=rdma (SGLang's default) but this node has no RDMA "
                                    "device: "
                                    "Mooncake moves the KV over TCP",
                                    Severity.WARNING,
                                    "Run the probe agents on the serving nodes, give --disaggregation-ib-device, or "
                                    "set MOONCAKE_PROTOCOL=tcp knowingly.",
                                )
                            )
    report.findings.extend(new)
    report.verdict = verdict_of(report.findings)


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        out = _child(job)
    except Exception as exc:  # the child's own failure, reported as a finding
        out = {"error": "probe-error", "message": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)  # the engine's threads do not need to be joined


if __name__ == "__main__":
    main()
