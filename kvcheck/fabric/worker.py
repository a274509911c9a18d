"""One fabric node: ``python -m kvcheck.fabric.worker --etcd URL --run RUN --node NAME``.

The worker waits (``--join-timeout``) for its assignment in etcd (``assign/<node>``,
see ``kvcheck.fabric.control``), takes the instance's environment (the node's own
environment wins: that is what the server there would run with), starts one kvcheck
agent (``kvcheck.nixl.agent.KvAgent``) with the role, geometry and memory kinds of its
instance (VRAM on a GPU, DRAM stand-ins without one), serves its metadata on
``--listen-host`` and publishes it in etcd (NIXL's own path, plus kvcheck's listener
address for region confirmation), and reports ``node/<node>``: the agent, its
registration issues, the UCX environment and the node's NICs, RDMA devices and GPUs.

A decode node then only serves (drives UCX progress). A prefill node runs each probe the
coordinator puts in ``cmd/<node>`` with its own agent (``kvcheck.nixl.probe_child.
probe_with_agent``: confirmed regions only, real bytes, read back, a deadline on every
wait) and writes ``result/<node>/<seq>``, with the UCX lanes the connection used (UCX's
debug log of the endpoint's wire-up, kept in a file of the worker's own, never printed).

A heartbeat thread bumps ``alive/<node>`` every ``HEARTBEAT_S``. The worker stops on
``stop`` (or its assignment withdrawn), at ``--ttl``, on SIGTERM, or when etcd has not answered for ``--etcd-grace``
seconds; it then deregisters and withdraws its metadata.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time

HEARTBEAT_S = 1.0
CMD_POLL_S = 0.1
STOP_POLL_S = 1.0


class _Log:
    """UCX/NIXL logging (fd 1 and 2) goes to a private file; ``take()`` returns what was
    written since the last call and empties the file."""

    def __init__(self):
        fd, path = tempfile.mkstemp(prefix="kvcheck-fabric-ucx-", suffix=".log")
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND)
        os.close(fd)
        os.unlink(path)  # no name on disk: nothing is left behind, even after SIGKILL
        self.stdout_fd = os.dup(1)
        self.stderr = os.fdopen(os.dup(2), "w", buffering=1)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)

    def take(self) -> str:
        size = os.fstat(self.fd).st_size
        keep = 64 << 20
        data = os.pread(self.fd, min(size, keep), max(0, size - keep))
        os.ftruncate(self.fd, 0)
        return data.decode(errors="replace")

    def close(self) -> None:
        pass

    def restore(self) -> None:
        """Give fds 1 and 2 back (before re-executing the worker)."""
        os.dup2(self.stdout_fd, 1)
        os.dup2(self.stderr.fileno(), 2)


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m kvcheck.fabric.worker")
    ap.add_argument("--etcd", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--listen-host", default=None)
    ap.add_argument("--ttl", type=float, default=900.0)
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--etcd-grace", type=float, default=10.0)
    ap.add_argument("--after-seq", type=int, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = _args(argv)
    from kvcheck.fabric.control import Control

    ctl = Control(a.etcd, a.run)
    log = _Log()
    started = time.monotonic()
    stop = threading.Event()
    why = {"reason": "ttl"}

    def on_signal(signum, frame):
        why["reason"] = "signal"
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def say(text: str) -> None:
        log.stderr.write(f"kvcheck fabric worker {a.node}: {text}\n")

    assign = None
    deadline = started + a.join_timeout
    while assign is None and time.monotonic() < deadline and not stop.is_set():
        try:
            assign = ctl.get("assign", a.node)
        except Exception:
            assign = None
        if assign is None:
            stop.wait(0.25)
    if assign is None:
        say("no assignment in etcd before --join-timeout")
        log.close()
        return 3
    env_asked = assign.get("env") or {}
    for k, v in env_asked.items():
        os.environ.setdefault(k, str(v))
    node_env = {
        k: os.environ[k] for k in sorted(os.environ) if k.startswith(("UCX_", "NIXL_", "SGLANG_DISAGGREGATION"))
    }
    os.environ["UCX_LOG_LEVEL"] = (
        "debug"  # the endpoint's lanes (see kvcheck.fabric.nodeinfo); into the private log only
    )
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")

    from kvcheck.fabric.nodeinfo import default_listen_host, lanes_used, node_facts
    from kvcheck.nixl.agent import KvAgent, Layout

    host = a.listen_host or default_listen_host(os.environ)
    role = assign["role"]
    layout = Layout.from_dict(assign["layout"])
    record = {
        "node": a.node,
        "role": role,
        "pid": os.getpid(),
        "env": node_env,
        "facts": node_facts(),
        "status": "ready",
        "error": None,
    }
    agent = KvAgent(
        layout,
        name=f"kvcheck-{role}-{a.node}-{os.getpid()}",
        listen=(host, 0),
        etcd=a.etcd,
        backend=assign.get("backend", "UCX"),
        gpu=assign.get("gpu", "auto"),
        max_bytes=int(assign.get("max_bytes", 4 << 30)),
    )
    try:
        agent.start()
    except Exception as exc:  # InputError: the UCX backend or the listener could not start
        record.update(status="failed", error=str(exc), ucx_log=_tail_errors(log.take()))
    if record["status"] == "ready":
        summary = agent.summary()
        record.update(
            agent=agent.name,
            listen=summary["listen"],
            issues=summary["issues"],
            registered_bytes=summary["registered_bytes"],
            gpu=summary["gpu"],
            regions=summary["regions"],
            timings=summary["timings"],
        )
        if any(
            i["finding_id"] in ("agent-register-failed", "agent-alloc-failed", "agent-publish-failed")
            for i in summary["issues"]
        ):
            record["status"] = "registration-failed"
    if role == "prefill":
        import kvcheck.nixl.probe_child  # noqa: F401  (imported before joining: the first probe is timed like the others)
    log.take()
    etcd_ok = {"at": time.monotonic()}
    try:
        ctl.put(record, "node", a.node)
    except Exception as exc:
        say(f"cannot report to etcd: {exc}")
        agent.close()
        log.close()
        return 3

    def heartbeat():
        n = 0
        while not stop.is_set():
            n += 1
            try:
                intact = agent.guards_intact() if agent.guards and agent.nixl is not None else None
                ctl.put({"n": n, "pid": os.getpid(), "guards_intact": intact}, "alive", a.node)
                # The coordinator sets stop, then clears the run's keys: either ends the worker.
                if n % max(int(STOP_POLL_S / HEARTBEAT_S), 1) == 0 and (
                    ctl.get("stop") is not None or ctl.get("assign", a.node) is None
                ):
                    why["reason"] = "stopped"
                    stop.set()
                etcd_ok["at"] = time.monotonic()
            except Exception:
                if time.monotonic() - etcd_ok["at"] > a.etcd_grace:
                    why["reason"] = "etcd-lost"
                    stop.set()
            stop.wait(HEARTBEAT_S)

    threading.Thread(target=heartbeat, name="kvcheck-fabric-heartbeat", daemon=True).start()
    end = started + a.ttl
    last_seq = a.after_seq
    try:
        while not stop.is_set() and record["status"] != "failed":
            if time.monotonic() > end:
                why["reason"] = "ttl"
                break
            if role == "prefill" and record["status"] == "ready":
                try:
                    cmd = ctl.get("cmd", a.node)
                    etcd_ok["at"] = time.monotonic()
                except Exception:
                    cmd = None
                if cmd and cmd.get("seq") != last_seq and (a.after_seq is None or cmd.get("seq", 0) > a.after_seq):
                    last_seq = cmd["seq"]
                    result, wedged = _probe_bounded(agent, cmd["job"], log, lanes_used)
                    try:
                        ctl.put(result, "result", a.node, str(last_seq))
                    except Exception:
                        pass
                    if wedged:
                        _reexec(a, agent, log, last_seq, argv)
                    continue
                stop.wait(CMD_POLL_S)
            else:
                agent.poll_notifications() if agent.nixl is not None else None
                stop.wait(0.001 if time.monotonic() < agent._busy_until else 0.05)
    finally:
        stop.set()
        agent.close()
        log.close()
    return 0


WEDGE_MARGIN_S = 1.0


def _probe_bounded(agent, job: dict, log, lanes_used) -> tuple[dict, bool]:
    """``_probe`` in a thread, given the probe's own budget (``probe_budget``) less
    ``WEDGE_MARGIN_S``: a NIXL/UCX call that never returns (seen when a peer's listener
    answers but UCX's own connection is blocked) ends as ``probe-timeout`` at the step it
    was in, and ``(result, True)`` tells the caller the agent is wedged."""
    from kvcheck.nixl.probe import RECHECK_S, probe_budget

    events: list[dict] = []
    box: dict = {}
    th = threading.Thread(
        target=lambda: box.setdefault("result", _probe(agent, job, log, lanes_used, events)), daemon=True
    )
    th.start()
    budget = max(probe_budget(job) - RECHECK_S - WEDGE_MARGIN_S, 1.0)
    th.join(budget)
    if "result" in box:
        return box["result"], False
    step = next((ev["step"] for ev in reversed(events) if ev.get("type") == "step"), "start")
    return {
        "ok": False,
        "segments": [],
        "steps": {},
        "seconds": budget,
        "lanes": lanes_used(log.take()),
        "remote_agent": None,
        "wedged": True,
        "findings": [
            {
                "id": "probe-timeout",
                "severity": "error",
                "message": f"step '{step}': a NIXL/UCX call did not return within {budget:.0f} s (the peer's "
                "listener answered, "
                "UCX's own connection to it did not complete: a firewall or route that lets one port through?)",
            }
        ],
    }, True


def _reexec(a, agent, log, seq: int, argv) -> None:
    """Replace this worker by a fresh one (new agent, same node): the wedged agent is
    withdrawn from etcd without touching NIXL, and the new process skips probes up to ``seq``."""
    from kvcheck.nixl.transport import EtcdGateway

    try:
        EtcdGateway(a.etcd, timeout=2.0).delete_agent(agent.name)
    except Exception:
        pass
    log.restore()
    log.close()
    args = list(argv if argv is not None else sys.argv[1:])
    if "--after-seq" in args:
        i = args.index("--after-seq")
        del args[i : i + 2]
    os.execv(sys.executable, [sys.executable, "-m", "kvcheck.fabric.worker", *args, "--after-seq", str(seq)])


def _probe(agent, job: dict, log, lanes_used, events: list | None = None) -> dict:
    """Run one probe; the events reduced to a result dict, with the lanes UCX used."""
    from kvcheck.fabric.nodeinfo import counter_delta, loss_counters
    from kvcheck.nixl.probe_child import probe_with_agent

    events = events if events is not None else []
    log.take()
    before = loss_counters()
    t0 = time.monotonic()
    try:
        probe_with_agent(agent, job, lambda **ev: events.append(ev))
    except Exception as exc:  # never leave the coordinator without an answer
        events.append(
            {"type": "finding", "id": "probe-error", "message": f"{type(exc).__name__}: {exc}", "severity": "error"}
        )
        events.append({"type": "end", "ok": False})
    seconds = time.monotonic() - t0
    counters = counter_delta(before, loss_counters())
    text = log.take()
    out = {
        "ok": False,
        "segments": [],
        "findings": [],
        "steps": {},
        "seconds": seconds,
        "lanes": lanes_used(text),
        "remote_agent": None,
        "counters": counters,
    }
    for ev in events:
        t = ev.get("type")
        if t == "segment":
            out["segments"].append(ev["segment"])
        elif t == "finding":
            out["findings"].append({"id": ev["id"], "message": ev["message"], "severity": ev.get("severity", "error")})
        elif t == "step_done":
            out["steps"][ev["step"]] = ev.get("seconds")
        elif t == "step":
            out["last_step"] = ev["step"]
        elif t == "info" and ev.get("remote_agent"):
            out["remote_agent"] = ev["remote_agent"]
        elif t == "end":
            out["ok"] = bool(ev.get("ok"))
    if not out["ok"]:
        out["ucx_errors"] = _tail_errors(text)
    return out


def _tail_errors(text: str) -> list[str]:
    """The last few UCX/NIXL error or warning lines of a log."""
    lines = [
        ln.strip()
        for ln in text.splitlines()
        if (" ERROR " in ln or " WARN " in ln or "error" in ln.lower()) and "DEBUG" not in ln
    ]
    return [ln[-300:] for ln in lines[-5:]]


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip NIXL/UCX teardown, which can block on a dead peer
