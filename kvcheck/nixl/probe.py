"""The probe: a real KV-shaped transfer from a prefill-role agent to a decode-role agent.

Mirrors the runtime's equal-TP / segmented path (``_prep_equal_tp_dlist`` and
``_kv_xfer_mem_segments`` in SGLang's ``disaggregation/nixl/conn.py``): per segment of
the plan, one prepared descriptor-list pair (one descriptor per region per page, local
``item_len`` bytes each, remote at ``page * dst_item_len``), one ``WRITE`` carrying a
notification suffixed ``_part_i_n``. Then kvcheck READs the same descriptors back into
the (zeroed) source pages and compares them with the page-index pattern it wrote.

The initiator runs in a child process (``python -m kvcheck.nixl.probe_child``, its code in
``kvcheck.nixl.probe_child``; this module holds the parent's side) that reports
JSON lines; the parent enforces the overall deadline and kills the child if a NIXL call
itself blocks. Inside the child every wait has a deadline and releases its handle.
The probe only writes into regions a kvcheck agent allocated for it, whatever the
metadata says: before loading the metadata it asks the agent itself (kvcheck's
``KVCHECK:CONFIRM`` + nonce on the agent's listener, see ``kvcheck.nixl.transport``) for
the regions it allocated, refuses any blob region outside them
(``probe-unconfirmed-region``), refuses blobs it cannot confirm (saved files, etcd
entries without a live listener or differing from what the agent serves:
``probe-unconfirmed``; foreign agents: ``probe-not-kvcheck``), and bounds-checks every
remote descriptor against a confirmed region (same memory kind and device id).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field

from kvcheck.checks.base import Finding, Severity
from kvcheck.errors import KvcheckError

# The child's code moved to probe_child; re-exported for the old import path.
from kvcheck.nixl.probe_child import PING_COUNT, main, probe_with_agent

FIXES = {
    "probe-unreachable": "start the decode-role agent (kvcheck agent --role decode --config FILE --listen HOST:PORT "
    "--ttl 600) and check the address and firewall",
    "probe-timeout": "the peer stopped answering: check it is not frozen or overloaded (and that UCX_NET_DEVICES "
    "names a reachable interface), then rerun",
    "probe-peer-lost": "the decode-role agent died during the probe: restart it and rerun",
    "probe-no-common-backend": "use the same NIXL backend on both sides (SGLANG_DISAGGREGATION_NIXL_BACKEND, kvcheck "
    "agent --backend)",
    "probe-remote-unregistered": "the decode agent did not register the memory the plan targets: start it with the "
    "decode server's config",
    "probe-remote-kind": "the decode agent registered another memory kind than the plan needs: check "
    "--enable-hisparse and the decode config",
    "probe-data-mismatch": "bytes did not arrive intact: check UCX_TLS/UCX_NET_DEVICES and the NIC, rerun with "
    "UCX_LOG_LEVEL=info",
    "probe-registration-failed": "the runtime would fail the same way (NIXL memory registration failed): check GPU "
    "drivers, ulimit -l and UCX memory types",
    "probe-tcp-fallback": "UCX moved KV over TCP: set UCX_TLS/UCX_NET_DEVICES to the RDMA devices (ucx_info -d lists "
    "them) on both nodes",
    "probe-error": "see the message; rerun with UCX_LOG_LEVEL=info for NIXL's own log",
    "probe-not-kvcheck": "point --decode-agent at a kvcheck agent: the probe only writes into memory a kvcheck agent "
    "allocated",
    "probe-peer-restarted": "the decode-role agent restarted during the probe (new process, new metadata): rerun the "
    "probe against the running agent",
    "probe-unconfirmed": "point --decode-agent at the live agent (HOST:PORT of its listener, or "
    "etcd://HOST:PORT/NAME of an agent started with --etcd and a --listen address the prefill node reaches); "
    "saved or altered metadata is never written to",
    "probe-unconfirmed-region": "the metadata names memory the agent did not allocate for the probe (altered or "
    "stale): read it again from the live agent; never edit a blob for a probe",
    "probe-skipped": "fix the static findings first: the runtime would not transfer with this plan",
}


@dataclass
class ProbeResult:
    """What the probe did: per segment ``bytes``, ``pages``, ``latency_s``, ``bandwidth_Bps``,
    ``verified``; ``steps``: seconds per step; ``findings``; ``transport`` as learned."""

    ok: bool
    segments: list[dict] = field(default_factory=list)
    steps: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    transport: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    local_agent: str | None = None
    remote_agent: str | None = None

    def as_dict(self) -> dict:
        """JSON-ready (``Report.extra["probe"]``)."""
        return {
            "ok": self.ok,
            "local_agent": self.local_agent,
            "remote_agent": self.remote_agent,
            "segments": self.segments,
            "steps": self.steps,
            "transport": self.transport,
            "notes": self.notes,
            "findings": [f.contract() for f in self.findings],
        }


def _finding(fid: str, message: str, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(id=fid, severity=severity, message=message, fix=FIXES.get(fid, FIXES["probe-error"]))


def build_job(
    plan,
    prefill_geometry,
    decode_geometry,
    target: str,
    *,
    pages: int,
    timeout: float,
    backend: str = "UCX",
    allow_foreign: bool = False,
) -> dict:
    """The child's job: source layout, the plan's segments and destination indices, the
    decode's item lengths, the target spec, ``pages`` per region, ``timeout`` (seconds)."""
    from kvcheck.nixl.agent import Layout

    dst_idx = plan.dst_indices or list(range(plan.n_src))
    return {
        "target": target,
        "timeout": timeout,
        "backend": backend,
        "pages": pages,
        "src": Layout.from_geometry(prefill_geometry, pages).as_dict(),
        "dst_item_lens": decode_geometry.item_lens,
        "dst_kinds": decode_geometry.kinds,
        "segments": [s.as_list() for s in plan.segments],
        "dst_indices": dst_idx,
        "nonce": int.from_bytes(os.urandom(4), "little"),
        "allow_foreign": allow_foreign,
    }


def probe_budget(job: dict) -> float:
    """Seconds the whole probe may take: ``timeout x (3 + 3 x segments) + 10`` (agent
    start-up, fetch and confirmation, load, and per segment prepare/write/read-back), plus
    the re-check of a failing peer (at most ``RECHECK_S``)."""
    n_seg = max(1, len(job["segments"]))
    return job["timeout"] * (3 + 3 * n_seg) + 10 + RECHECK_S


RECHECK_S = 3.0
_PEER_FAULTS = ("probe-timeout", "probe-peer-lost", "probe-error", "probe-data-mismatch", "probe-remote-unregistered")


def run_probe(job: dict, *, on_event=None, python: str | None = None) -> ProbeResult:
    """Run the probe child with ``job`` (see ``build_job``) and collect its events.

    ``on_event(event: dict)`` sees each progress event (for the rich display; a ``hold``
    event when ``job["hold"]`` names steps, answered once ``on_event`` returns). The
    whole probe gets ``probe_budget(job)`` seconds, after which the child is killed and
    the last step it started is named in a ``probe-timeout`` finding. When a step fails
    after the peer confirmed its regions, the peer is asked again (``diagnose_peer``):
    refused or closed -> ``probe-peer-lost``, another pid or blob -> ``probe-peer-restarted``,
    no answer -> ``probe-timeout``. Never raises for a probe failure: everything becomes
    a finding.
    """
    result = ProbeResult(ok=False)
    budget = probe_budget(job) - RECHECK_S
    cmd = [python or sys.executable, "-m", "kvcheck.nixl.probe_child"]
    env = dict(os.environ)
    env.setdefault("UCX_LOG_LEVEL", "error")
    env.setdefault("NIXL_LOG_LEVEL", "WARN")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all three are pipes
    proc.stdin.write(json.dumps(job).encode() + b"\n")
    proc.stdin.flush()
    if not job.get("hold"):
        proc.stdin.close()
    deadline = time.monotonic() + budget
    last_step = "start agent"
    confirm = None
    buf = b""
    err = bytearray()
    done = False
    while not done:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            result.findings.append(
                _finding("probe-timeout", f"the probe hung at step '{last_step}' and was stopped after {budget:.0f} s")
            )
            break
        ready, _, _ = select.select([proc.stdout, proc.stderr], [], [], min(left, 0.5))
        if proc.stderr in ready:  # drain, so NIXL/UCX logging can never block the child
            chunk = os.read(proc.stderr.fileno(), 65536)
            err += chunk
            del err[:-4096]
        if proc.stdout not in ready:
            if proc.poll() is not None and not ready:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            if on_event:
                on_event(ev)
            t = ev.get("type")
            if t == "step":
                last_step = ev["step"]
            elif t == "hold":
                try:
                    proc.stdin.write(b"go\n")
                    proc.stdin.flush()
                except OSError:
                    pass
            elif t == "step_done":
                result.steps[ev["step"]] = ev.get("seconds")
            elif t == "segment":
                result.segments.append(ev["segment"])
            elif t == "info":
                result.local_agent = ev.get("local_agent", result.local_agent)
                result.remote_agent = ev.get("remote_agent", result.remote_agent)
                result.transport.update(ev.get("transport", {}))
                result.notes.extend(ev.get("notes", []))
                confirm = ev.get("confirm", confirm)
            elif t == "finding":
                result.findings.append(_finding(ev["id"], ev["message"], Severity(ev.get("severity", "error"))))
            elif t == "end":
                result.ok = bool(ev.get("ok"))
                done = True
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if not done and not any(f.id == "probe-timeout" for f in result.findings):
        result.findings.append(
            _finding(
                "probe-error",
                f"the probe process ended (status {proc.returncode}) at step '{last_step}' without a result: "
                f"{err.decode(errors='replace').strip()[-600:]}",
            )
        )
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except Exception:
            pass
    if not result.ok and confirm and any(f.id in _PEER_FAULTS for f in result.findings):
        verdict = diagnose_peer(confirm, min(job["timeout"], RECHECK_S))
        if verdict is not None:
            fid, why = verdict
            step_msgs = "; ".join(f.message for f in result.findings if f.id in _PEER_FAULTS)
            result.findings = [f for f in result.findings if f.id not in _PEER_FAULTS]
            result.findings.append(_finding(fid, f"{why} (at: {step_msgs})"))
    return result


def diagnose_peer(confirm: dict, timeout: float) -> tuple[str, str] | None:
    """Ask the peer that confirmed ``confirm`` (``where``, ``pid``, ``blob_sha256``) again.

    Returns ``("probe-peer-lost", why)`` when nothing listens or the connection closes,
    ``("probe-peer-restarted", why)`` when another process or blob answers (same name or
    not), ``("probe-timeout", why)`` when it does not answer within ``timeout``, and None
    when the same agent answers (the failure was not the peer's life cycle).
    """
    from kvcheck.nixl.transport import NotConfirmable, _split_hostport, confirm_agent

    where = confirm["where"]
    host, port = _split_hostport(where, where)
    try:
        again = confirm_agent(host, port, timeout)
    except NotConfirmable:
        return (
            "probe-peer-restarted",
            f"the decode-role agent at {where} was replaced by something that is not the agent the probe confirmed",
        )
    except KvcheckError as exc:
        text = str(exc)
        if "deadline" in text or "within" in text:
            return "probe-timeout", f"the decode-role agent at {where} stopped answering (frozen or overloaded)"
        return "probe-peer-lost", f"the decode-role agent at {where} died during the probe ({text})"
    if again.pid != confirm.get("pid") or again.blob_sha256 != confirm.get("blob_sha256"):
        return (
            "probe-peer-restarted",
            f"the decode-role agent at {where} restarted during the probe: {again.name!r} now runs as pid {again.pid} "
            f"with new metadata (was pid {confirm.get('pid')})",
        )
    return None


__all__ = [
    "FIXES",
    "PING_COUNT",
    "RECHECK_S",
    "ProbeResult",
    "build_job",
    "diagnose_peer",
    "main",
    "probe_budget",
    "probe_with_agent",
    "run_probe",
]

if __name__ == "__main__":
    main()
