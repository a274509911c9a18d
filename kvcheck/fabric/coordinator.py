"""The coordinator: assign, join, probe in rounds, retest, and collect (no judgement here;
``kvcheck.fabric.findings`` names what went wrong).

1. Every node's assignment goes to etcd; workers are started (``Launcher``) or already
   run (``--emit``'d Job / srun). Join ends when every node reported or at
   ``join_timeout``; a launched worker that exits before reporting ends its wait at once.
2. Rounds (``FabricPlan.rounds``): each prefill node of a round gets one probe in
   ``cmd/<node>`` against its decode node's agent (``etcd://…/<agent>``: the probe
   confirms the regions with the agent itself). A round ends when every result is in,
   at the probes' own budget (``kvcheck.nixl.probe.probe_budget``), or earlier for a
   node whose heartbeat stopped for ``lost_after`` seconds (frozen or dead): it is
   ``lost`` and left out of every later probe.
3. Retests, ClusterKit style: the pairs outside tolerance (bandwidth under
   ``bw_tolerance`` of the best, ping latency over ``lat_tolerance`` x the lowest; failed
   pairs too, once) are probed again in rounds, at most ``retests`` times, keeping the
   worse half each time; each pair keeps its best figures.
4. The whole run has one ``deadline``; etcd not answering ends it (``etcd_lost``).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from dataclasses import dataclass, field

from kvcheck.errors import UnreachableError
from kvcheck.fabric.control import Control
from kvcheck.fabric.rounds import schedule


@dataclass
class FabricOptions:
    """How the run goes; see the module docstring. ``timeout``: seconds per probe step."""

    etcd: str
    run: str | None = None
    join_timeout: float = 60.0
    deadline: float = 600.0
    timeout: float = 5.0
    bw_tolerance: float = 0.93
    lat_tolerance: float = 2.1
    retests: int = 3
    lost_after: float = 5.0
    ttl: float | None = None


@dataclass
class PairRecord:
    """One required pair: every attempt's result, and the best figures."""

    prefill: str
    decode: str
    attempts: list[dict] = field(default_factory=list)
    status: str = "not-probed"  # ok | failed | not-probed | skipped
    why: str = ""

    @property
    def good(self) -> list[dict]:
        return [a for a in self.attempts if a.get("ok")]

    def bandwidth(self) -> float | None:
        got = [v for v in (metrics(a)[0] for a in self.good) if v]
        return max(got) if got else None

    def latency(self) -> float | None:
        got = [v for v in (metrics(a)[1] for a in self.good) if v]
        return min(got) if got else None

    def last(self) -> dict | None:
        return self.attempts[-1] if self.attempts else None


def metrics(result: dict) -> tuple[float | None, float | None, int]:
    """(bandwidth B/s, latency s, bytes checked) of one probe result."""
    segs = [s for s in result.get("segments", []) if s.get("verified")]
    nbytes = sum(s["bytes"] for s in segs)
    secs = sum(s["latency_s"] for s in segs if s.get("latency_s"))
    pings = [s["ping_s"] for s in segs if s.get("ping_s")]
    return (nbytes / secs if secs > 0 else None), (min(pings) if pings else None), nbytes


@dataclass
class FabricRun:
    """What happened: node records (``nodes``: name -> the worker's report, or None),
    nodes ``lost`` mid-run (name -> why), ``pairs`` (PairRecord per required pair),
    ``rounds`` run (first pass and retests), ``etcd_lost`` (why, or None), ``seconds``."""

    plan: object
    nodes: dict[str, dict | None]
    lost: dict[str, str] = field(default_factory=dict)
    pairs: dict[tuple[str, str], PairRecord] = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)
    etcd_lost: str | None = None
    deadline_hit: bool = False
    seconds: float = 0.0
    join_seconds: float = 0.0
    options: FabricOptions | None = None
    launch_output: dict[str, str] = field(default_factory=dict)
    guards: dict[str, bool] = field(default_factory=dict)


class _Deadline(Exception):
    pass


class Coordinator:
    def __init__(self, plan, opts: FabricOptions, launcher=None, on_event=None):
        self.plan = plan
        self.opts = opts
        self.launcher = launcher
        self.on_event = on_event or (lambda kind, data: None)
        self.run_id = opts.run or f"run-{uuid.uuid4().hex[:10]}"
        self.ctl = Control(opts.etcd, self.run_id)
        self.start = time.monotonic()
        self.end = self.start + opts.deadline
        self.seq = 0
        self.beats: dict[str, tuple[int | None, float]] = {}
        self.result = FabricRun(plan=plan, nodes={n: None for n in plan.nodes}, options=opts)
        for p in plan.pairs:
            self.result.pairs[p] = PairRecord(*p)
        etcd = opts.etcd.split("://", 1)[-1].rstrip("/")
        self.etcd_hostport = etcd

    # -- the run --------------------------------------------------------------------
    def run(self) -> FabricRun:
        try:
            self._assign()
            self._join()
            usable = [p for p in self.plan.pairs if self._probe_ready(p)]
            self._rounds(self.plan.rounds, "probe", usable)
            self._retests()
            self._beats()
        except UnreachableError as exc:
            self.result.etcd_lost = str(exc)
        except _Deadline:
            self.result.deadline_hit = True
        finally:
            try:
                if self.result.etcd_lost is None:
                    self.ctl.put({"why": "done"}, "stop")
            except UnreachableError:
                pass
            if self.launcher is not None:
                self.launcher.close()
                for n in self.plan.nodes:
                    self.result.launch_output[n] = self.launcher.output(n)
            try:
                if self.result.etcd_lost is None:
                    self.ctl.clear()
            except UnreachableError:
                pass
            self.result.seconds = time.monotonic() - self.start
        return self.result

    def _check_deadline(self) -> None:
        if time.monotonic() > self.end:
            raise _Deadline()

    def _assign(self) -> None:
        ttl = self.opts.ttl or (self.opts.deadline + 60)
        for name, node in self.plan.nodes.items():
            if node.layout is None:
                continue
            backend = node.env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX")  # the runtime's default: UCX
            self.ctl.put(
                {
                    "role": node.role,
                    "layout": node.layout,
                    "env": node.env,
                    "backend": backend,
                    "instance": node.instance,
                },
                "assign",
                name,
            )
        if self.launcher is not None:
            for name, node in self.plan.nodes.items():
                if node.layout is not None:
                    self.launcher.start(
                        name, etcd=self.opts.etcd, run=self.run_id, ttl=ttl, join_timeout=self.opts.join_timeout
                    )

    def _join(self) -> None:
        t0 = time.monotonic()
        deadline = min(t0 + self.opts.join_timeout, self.end)
        want = {n for n, x in self.plan.nodes.items() if x.layout is not None}
        self.on_event("join", {"nodes": sorted(want)})
        while True:
            got = self.ctl.scan("node")
            for n, rec in got.items():
                if n in self.result.nodes:
                    self.result.nodes[n] = rec
            pending = {n for n in want if self.result.nodes.get(n) is None}
            if self.launcher is not None:
                for n in list(pending):
                    if self.launcher.exited(n) is not None:
                        self.result.lost[n] = (
                            f"its worker exited (status {self.launcher.exited(n)}) before joining: "
                            f"{self.launcher.output(n)[-400:]}"
                        )
                        pending.discard(n)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.result.join_seconds = time.monotonic() - t0
        self.on_event("joined", {"nodes": {n: (r or {}).get("status") for n, r in self.result.nodes.items()}})
        self._beats()

    def _ready(self, node: str) -> bool:
        rec = self.result.nodes.get(node)
        if not rec:
            return False
        return rec.get("status") == "ready" and node not in self.result.lost

    def _probe_ready(self, pair) -> bool:
        rec = self.result.pairs[pair]
        if self.plan.job_for(pair) is None:
            rec.status = "skipped"
            rec.why = self.plan.skipped.get(
                (self.plan.nodes[pair[0]].class_id, self.plan.nodes[pair[1]].class_id), "no probe job"
            )
            return False
        return self._ready(pair[0]) and self._ready(pair[1])

    def _beats(self) -> None:
        now = time.monotonic()
        for n, v in self.ctl.scan("alive").items():
            count = v.get("n") if isinstance(v, dict) else None
            if isinstance(v, dict) and v.get("guards_intact") is not None:
                self.result.guards[n] = bool(v["guards_intact"])
            old = self.beats.get(n)
            if old is None or old[0] != count:
                self.beats[n] = (count, now)

    def _stale(self, node: str) -> bool:
        b = self.beats.get(node)
        if b is None:
            return time.monotonic() - self.start > self.opts.join_timeout + self.opts.lost_after
        return time.monotonic() - b[1] > self.opts.lost_after

    def _rounds(self, rounds, kind: str, allowed) -> None:
        allowed = set(allowed)
        for i, rnd in enumerate(rounds):
            pairs = [p for p in rnd if p in allowed and self._ready(p[0]) and self._ready(p[1])]
            if not pairs:
                continue
            self._check_deadline()
            self.on_event("round", {"kind": kind, "index": i, "pairs": pairs})
            t0 = time.monotonic()
            self._one_round(pairs)
            self.result.rounds.append(
                {"kind": kind, "index": i, "pairs": [list(p) for p in pairs], "seconds": time.monotonic() - t0}
            )

    def _one_round(self, pairs) -> None:
        from kvcheck.nixl.probe import probe_budget

        sent = {}
        budget = 0.0
        for p, d in pairs:
            job = dict(self.plan.job_for((p, d)))
            peer = self.result.nodes[d]
            assert peer is not None  # only pairs of ready nodes are probed (_probe_ready)
            job["target"] = f"etcd://{self.etcd_hostport}/{peer['agent']}"
            job["nonce"] = int.from_bytes(os.urandom(4), "little")
            job["timeout"] = self.opts.timeout
            self.seq += 1
            self.ctl.put({"seq": self.seq, "job": job, "peer": d}, "cmd", p)
            sent[p] = (self.seq, d)
            budget = max(budget, probe_budget(job))
        deadline = min(time.monotonic() + budget + 2.0, self.end)
        pending = dict(sent)
        last_beat = 0.0
        while pending:
            results = self.ctl.scan("result")
            for p, (seq, d) in list(pending.items()):
                res = results.get(f"{p}/{seq}")
                if res is not None:
                    rec = self.result.pairs[(p, d)]
                    rec.attempts.append(res)
                    rec.status = "ok" if res.get("ok") else "failed"
                    del pending[p]
            if not pending:
                break
            now = time.monotonic()
            if now - last_beat > 0.5:
                self._beats()
                last_beat = now
                for p, (_seq, d) in list(pending.items()):
                    for n in (p, d):
                        if n not in self.result.lost and self._stale(n):
                            self.result.lost[n] = (
                                f"stopped answering mid-run: no heartbeat for {self.opts.lost_after:g} s (frozen or "
                                "dead)"
                            )
                    if p in self.result.lost:
                        rec = self.result.pairs[(p, d)]
                        rec.attempts.append(
                            {
                                "ok": False,
                                "findings": [
                                    {
                                        "id": "probe-timeout",
                                        "message": f"prefill node {p} {self.result.lost[p]}",
                                        "severity": "error",
                                    }
                                ],
                                "segments": [],
                                "lanes": {"rma": [], "am": []},
                                "lost": p,
                            }
                        )
                        rec.status = "failed"
                        del pending[p]
                    if self.launcher is not None and self.launcher.exited(p) is not None and p in pending:
                        self.result.lost[p] = f"its worker exited (status {self.launcher.exited(p)}) mid-run"
            if now > deadline:
                for p, (_seq, d) in pending.items():
                    rec = self.result.pairs[(p, d)]
                    rec.attempts.append(
                        {
                            "ok": False,
                            "findings": [
                                {
                                    "id": "probe-timeout",
                                    "message": f"no result from {p} within the probe budget ({budget:.0f} s)",
                                    "severity": "error",
                                }
                            ],
                            "segments": [],
                            "lanes": {"rma": [], "am": []},
                        }
                    )
                    rec.status = "failed"
                    self.result.lost.setdefault(p, f"gave no probe result within the probe budget ({budget:.0f} s)")
                break
            time.sleep(0.05)
        self._check_deadline()

    def _retests(self) -> None:
        tried_failed: set = set()
        keep = None
        for it in range(self.opts.retests):
            out = self.outside(tried_failed)
            if keep is not None:
                out = [p for p in out if p in keep]
            if not out:
                return
            if it > 0:
                out = out[: max(1, math.ceil(len(out) / 2))]
            tried_failed.update(p for p in out if self.result.pairs[p].status == "failed")
            keep = set(out)
            self._rounds(schedule(out), f"retest {it + 1}", out)

    def outside(self, tried_failed=frozenset()) -> list[tuple[str, str]]:
        """Pairs outside tolerance, worst first; failed pairs (both nodes alive) not yet retested."""
        recs = self.result.pairs
        bws = {p: r.bandwidth() for p, r in recs.items() if r.status == "ok"}
        lats = {p: r.latency() for p, r in recs.items() if r.status == "ok"}
        best = max([b for b in bws.values() if b], default=None)
        low = min([x for x in lats.values() if x], default=None)
        scored = []
        for p, r in recs.items():
            if r.status == "failed" and p not in tried_failed and self._ready(p[0]) and self._ready(p[1]):
                scored.append((float("inf"), p))
            elif r.status == "ok" and best and low:
                bw, lat = bws.get(p), lats.get(p)
                score = max(
                    (best / bw) if bw else float("inf"),
                    ((lat / low) / self.opts.lat_tolerance * self.opts.bw_tolerance) if lat else 0,
                )
                if (bw and bw < self.opts.bw_tolerance * best) or (lat and lat > self.opts.lat_tolerance * low):
                    scored.append((score, p))
        scored.sort(key=lambda x: -x[0])
        return [p for _, p in scored]


def run_fabric(plan, opts: FabricOptions, launcher=None, on_event=None) -> FabricRun:
    """Run the fabric probe of ``plan`` (``kvcheck.fabric.topology.FabricPlan``)."""
    return Coordinator(plan, opts, launcher, on_event).run()
