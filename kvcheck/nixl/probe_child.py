"""The probe's child process: the transfer itself, run as ``python -m kvcheck.nixl.probe_child < job.json``.

Reads the job ``kvcheck.nixl.probe.build_job`` wrote (JSON, one line on stdin) and
reports JSON lines on stdout (``step``, ``step_done``, ``segment``, ``finding``, ``info``,
``end``); the parent (``kvcheck.nixl.probe.run_probe``) enforces the overall deadline.
Mirrors the runtime's equal-TP / segmented path (``_prep_equal_tp_dlist`` and
``_kv_xfer_mem_segments`` in SGLang's ``disaggregation/nixl/conn.py``): per segment one
prepared descriptor-list pair (one descriptor per region per page, ``item_len`` bytes
each, remote at ``page * dst_item_len``), one ``WRITE`` with a ``_part_i_n``
notification, then a READ back into the zeroed source pages compared with the
page-index pattern written. Every wait has a deadline (seconds) and releases its
handle; the probe writes only into regions a kvcheck agent confirmed it allocated.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time

_OUT = sys.stdout


def _emit(**event) -> None:
    _OUT.write(json.dumps(event) + "\n")
    _OUT.flush()


class _Hung(Exception):
    def __init__(self, step: str, seconds: float):
        self.step, self.seconds = step, seconds


def _wait(agent, handle, timeout: float, step: str) -> float:
    """Poll ``handle`` until DONE; on ERR raise, on expiry release it and raise ``_Hung``."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        state = agent.check_xfer_state(handle)  # also drives UCX progress
        if state == "DONE":
            return time.perf_counter() - t0
        if state == "ERR":
            try:
                handle.release()
            except Exception:
                pass
            raise RuntimeError(f"transfer state ERR during {step}")
        polls += 1
        if polls > 1000:  # a slow transfer: stop spinning, leave the core to the peer
            time.sleep(min(0.002, 0.00005 * (polls - 1000)))
        if time.monotonic() > deadline:
            try:
                handle.release()
            except Exception:
                pass
            raise _Hung(step, timeout)


def _pattern(nonce: int, region: int, page: int) -> int:
    return (nonce * 2654435761 + region * 65599 + page * 131 + 1) & 0xFFFFFFFF


def _fill(view, value: int) -> None:
    import numpy as np

    n4 = len(view) // 4
    if n4:
        view[: n4 * 4].view(np.uint32)[:] = value
    view[n4 * 4 :] = value & 0xFF


def _check(view, value: int) -> bool:
    import numpy as np

    n4 = len(view) // 4
    ok = bool((view[: n4 * 4].view(np.uint32) == value).all()) if n4 else True
    return ok and bool((view[n4 * 4 :] == (value & 0xFF)).all())


def _hold(job: dict, step: str, timeout: float) -> None:
    """Fault injection for tests: when ``step`` is in ``job["hold"]``, report a ``hold``
    event and wait (at most 60 s) for a line on stdin before starting the step."""
    if step not in (job.get("hold") or ()):
        return
    _emit(type="hold", step=step)
    ready, _, _ = select.select([sys.stdin], [], [], 60)
    if ready:
        sys.stdin.readline()


def _fetch_and_confirm(job: dict, timeout: float, fail):
    """Read the target's blob and confirm it with the agent itself; ``(blob, meta,
    Confirmation)`` or None after reporting a finding.

    A listener target: blob and confirmation on one connection. etcd: the blob from etcd,
    the confirmation from the listener the agent published beside it, and the blob's
    SHA-256 must equal the one the agent confirms. A file: refused (nothing to confirm
    with). Every region of the blob must lie inside a region the agent confirmed, same
    memory kind and device id (``probe-unconfirmed-region``).
    """
    import hashlib

    from kvcheck.nixl.blob import parse_metadata
    from kvcheck.nixl.transport import NotConfirmable, confirm_agent, parse_target, read_agents

    target = job["target"]
    deadline = time.monotonic() + timeout
    kind = parse_target(target).kind
    if kind == "file":
        fail(
            "probe-unconfirmed",
            f"{target} is a saved blob: the probe never writes from a blob it cannot confirm with the live agent "
            "(point --decode-agent at the agent's HOST:PORT or etcd://HOST:PORT/NAME)",
        )
        return None
    try:
        if kind == "listener":
            t = parse_target(target)
            conf = confirm_agent(t.host, t.port, timeout, with_blob=True, precheck=_kvcheck_only)
            blob = conf.blob
            assert blob is not None  # with_blob=True
            meta = parse_metadata(blob, source=target)
        else:
            fetched = read_agents(target, timeout=timeout)
            if len(fetched) != 1:
                fail(
                    "probe-unconfirmed",
                    f"{target} names {len(fetched)} agents; name exactly one (etcd://HOST:PORT/NAME)",
                )
                return None
            f = fetched[0]
            blob, meta = f.blob, f.meta
            _kvcheck_only(meta)
            if f.listener is None:
                fail(
                    "probe-unconfirmed",
                    f"{meta.name!r} published no kvcheck listener address beside its etcd entry: "
                    "its regions cannot be confirmed (start it with kvcheck agent --etcd URL --listen HOST:PORT)",
                )
                return None
            conf = confirm_agent(f.listener[0], f.listener[1], max(deadline - time.monotonic(), 0.5))
    except NotConfirmable as exc:
        fid = "probe-not-kvcheck" if "not a kvcheck agent" in str(exc) else "probe-unconfirmed"
        fail(fid, str(exc))
        return None
    if conf.name != meta.name:
        fail("probe-unconfirmed", f"the agent at {conf.where} is {conf.name!r}, the metadata names {meta.name!r}")
        return None
    from kvcheck.nixl.live import remote_regions

    for r in remote_regions(meta, job["backend"]):
        if conf.covering(r.addr, r.length, r.reg_kind, r.dev_id) is None:
            fail(
                "probe-unconfirmed-region",
                f"region {r.index} of {meta.name!r}'s metadata ({hex(r.addr)}, {r.length} bytes, {r.reg_kind} dev "
                f"{r.dev_id:#x}) "
                f"is not inside any region the agent confirmed at {conf.where}: the metadata was altered or is "
                "stale; nothing was written",
            )
            return None
    if hashlib.sha256(blob).hexdigest() != conf.blob_sha256:
        fail(
            "probe-unconfirmed",
            f"the metadata read from {target} differs from the blob {meta.name!r} serves at {conf.where} "
            "(a stale or altered etcd entry); nothing was written",
        )
        return None
    return blob, meta, conf


def _read_back_record(agent, remote: str, meta, conf, backend: str, timeout: float) -> str | None:
    """READ (never write) the confirmation record from the NIXL agent ``meta`` names and
    compare it with the one ``conf``'s answer implies. Returns None when equal, else why
    not: the listener that answered is then not the NIXL agent of the metadata."""
    import ctypes

    from kvcheck.nixl.agent import CONFIRM_DEV_ID, CONFIRM_SLOT_BYTES, confirmation_record

    if conf.record is None or conf.answer is None:
        return (
            f"{meta.name!r} at {conf.where} gave no confirmation record (not this kvcheck release's agent?); "
            "nothing was written"
        )
    addr, length = conf.record
    pages = [r for r in meta.regions("DRAM", backend) if r.dev_id == CONFIRM_DEV_ID]
    if length != CONFIRM_SLOT_BYTES or not any(r.addr <= addr and addr + length <= r.addr + r.length for r in pages):
        return (
            f"the confirmation record {hex(addr)}+{length} is not inside {meta.name!r}'s confirmation page; "
            "nothing was written"
        )
    local = agent.confirm_page
    if local is None:
        return "the probe's own agent has no confirmation page (registration failed)"
    ctypes.memset(local, 0, length)
    lh = agent.nixl.prep_xfer_dlist("NIXL_INIT_AGENT", [(local, length, CONFIRM_DEV_ID)], "DRAM", backends=[backend])
    rh = agent.nixl.prep_xfer_dlist(remote, [(addr, length, CONFIRM_DEV_ID)], "DRAM", backends=[backend])
    try:
        h = agent.nixl.make_prepped_xfer("READ", lh, [0], rh, [0], b"")
        state = agent.nixl.transfer(h)
        if state == "ERR":
            raise RuntimeError("confirmation read post returned ERR")
        if state != "DONE":
            _wait(agent.nixl, h, timeout, "confirm over NIXL")
        h.release()
        got = ctypes.string_at(local, length)
    finally:
        lh.release()
        rh.release()
    if got != confirmation_record(conf.nonce, conf.answer):
        return (
            f"the NIXL agent {meta.name!r} did not record the confirmation its listener at {conf.where} gave: "
            "that listener is not the agent the metadata names; nothing was written"
        )
    return None


def _kvcheck_only(meta_or_blob) -> None:
    """Raise ``NotConfirmable`` unless the agent is a kvcheck agent (name ``kvcheck-...``)."""
    from kvcheck.nixl.blob import AgentMetadata, parse_metadata
    from kvcheck.nixl.transport import NotConfirmable

    meta = meta_or_blob if isinstance(meta_or_blob, AgentMetadata) else parse_metadata(meta_or_blob)
    if not meta.name.startswith("kvcheck-"):
        raise NotConfirmable(
            f"remote agent {meta.name!r} is not a kvcheck agent; the probe only writes into memory a kvcheck agent "
            "allocated"
        )


def _child(job: dict) -> int:
    from kvcheck.nixl.agent import KvAgent, Layout

    agent = None
    try:
        _emit(type="step", step="start agent")
        t = time.perf_counter()
        layout = Layout.from_dict(job["src"])
        agent = KvAgent(layout, backend=job["backend"])
        agent.start()
        for issue in agent.issues:
            if issue.finding_id == "agent-vram-untested":
                _emit(type="info", notes=[f"prefill side: {issue.message}"])
            else:
                _emit(
                    type="finding",
                    id="probe-registration-failed",
                    message=f"prefill-role agent: {issue.message}",
                    severity="error",
                )
                _emit(type="end", ok=False)
                return 0
        _emit(type="step_done", step="start agent", seconds=time.perf_counter() - t)
        probe_with_agent(agent, job, _emit)
        return 0
    except Exception as exc:  # the prefill-role agent could not start: a named finding
        from kvcheck.nixl.runtime import error_class

        _emit(
            type="finding", id="probe-error", message=f"step 'start agent': {error_class(exc)}: {exc}", severity="error"
        )
        _emit(type="end", ok=False)
        return 0
    finally:
        if agent is not None:
            try:
                agent.close()
            except Exception:
                pass


PING_COUNT = 5


def probe_with_agent(agent, job: dict, emit) -> None:
    """Run the probe of ``job`` from ``agent`` (a started prefill-role ``KvAgent`` whose
    layout is ``job["src"]``), reporting each event through ``emit(**event)``; ends with
    an ``end`` event. Also used by a fabric node, whose one agent probes many peers: the
    remote agent is unloaded at the end, so a retest loads it afresh. Each segment also
    carries ``ping_s``: the fastest of ``PING_COUNT`` one-page WRITEs (latency)."""
    import ctypes

    import numpy as np

    from kvcheck.nixl.live import remote_regions
    from kvcheck.nixl.runtime import error_class

    timeout = float(job["timeout"])
    nonce = int(job["nonce"])
    step = "fetch metadata"
    remote = None

    def begin(name):
        nonlocal step
        step = name
        emit(type="step", step=name)
        return time.perf_counter()

    def fail(fid, message, severity="error"):
        emit(type="finding", id=fid, message=message, severity=severity)

    try:
        emit(
            type="info",
            local_agent=agent.name,
            transport={
                "backend": job["backend"],
                "UCX_TLS": os.environ.get("UCX_TLS", "(unset: UCX chooses)"),
                "UCX_NET_DEVICES": os.environ.get("UCX_NET_DEVICES", "(unset: all)"),
            },
        )

        t = begin("fetch metadata")
        confirmed = _fetch_and_confirm(job, timeout, fail)
        if confirmed is None:
            emit(type="end", ok=False)
            return
        blob, meta, conf = confirmed
        emit(type="step_done", step="fetch metadata", seconds=time.perf_counter() - t)
        emit(
            type="info",
            remote_agent=meta.name,
            confirm={"where": conf.where, "pid": conf.pid, "blob_sha256": conf.blob_sha256},
        )

        _hold(job, "load metadata", timeout)
        t = begin("load metadata")
        if job["backend"] not in meta.backends:
            fail(
                "probe-no-common-backend",
                f"no common NIXL backend with {meta.name!r}: it offers {sorted(meta.backends)}, we use "
                f"{job['backend']}",
            )
            emit(type="end", ok=False)
            return
        try:
            remote = agent.nixl.add_remote_agent(blob)
        except Exception as exc:
            # Both sides offer the backend: a load failure is the peer's state, not a
            # backend mismatch; the parent asks the peer again (lost / restarted / frozen).
            fail("probe-error", f"loading {meta.name!r}'s metadata failed: {error_class(exc)}: {exc}")
            emit(type="end", ok=False)
            return
        regions = remote_regions(meta, job["backend"])
        try:  # wire up now, as the runtime's first transfer would, so latency is the transfer's
            agent.nixl.make_connection(remote)
        except Exception:
            pass
        emit(type="step_done", step="load metadata", seconds=time.perf_counter() - t)

        t = begin("confirm over NIXL")
        unconfirmed = _read_back_record(agent, remote, meta, conf, job["backend"], timeout)
        if unconfirmed:
            fail("probe-unconfirmed", unconfirmed)
            emit(type="end", ok=False)
            return
        emit(type="step_done", step="confirm over NIXL", seconds=time.perf_counter() - t)

        src_regions = agent.regions
        pages = int(job["pages"])
        dst_items = job["dst_item_lens"]
        segs = job["segments"]
        dst_indices = job["dst_indices"]
        all_ok = True
        for si, (start, end, src_kind, dst_kind) in enumerate(segs):
            n = len(segs)
            notif = (
                f"kvcheck-probe-{nonce:08x}_part_{si}_{n}".encode() if n > 1 else f"kvcheck-probe-{nonce:08x}".encode()
            )
            t = begin(f"prepare segment {si}")
            local, rdescs, expect = [], [], []
            reg_kind_remote = None
            problem: tuple[str, str] | None = None
            for i in range(start, end):
                s = src_regions[i]
                di = dst_indices[i]
                if di >= len(regions):
                    problem = (
                        "probe-remote-unregistered",
                        f"segment {si}: destination region {di} is not registered by {meta.name!r} (it has "
                        f"{len(regions)})",
                    )
                    break
                d = regions[di]
                if d.kind != dst_kind:
                    problem = (
                        "probe-remote-kind",
                        f"segment {si}: destination region {di} of {meta.name!r} is {d.kind}, the plan needs "
                        f"{dst_kind}",
                    )
                    break
                reg_kind_remote = d.reg_kind
                ditem = dst_items[di]
                usable = min(pages, d.length // ditem if ditem else 0)
                if usable < 1:
                    problem = (
                        "probe-remote-unregistered",
                        f"segment {si}: destination region {di} is {d.length} bytes, less than one {ditem}-byte page",
                    )
                    break
                for p in range(usable):
                    raddr = d.addr + p * ditem
                    if conf.covering(raddr, s.item_len, d.reg_kind, d.dev_id) is None:
                        problem = (
                            "probe-unconfirmed-region",
                            f"segment {si}: the descriptor for destination region {di} page {p} "
                            f"({hex(raddr)}, {s.item_len} bytes, {d.reg_kind} dev {d.dev_id:#x}) is not inside a "
                            f"region {meta.name!r} confirmed",
                        )
                        break
                    local.append((s.addr + p * s.item_len, s.item_len, s.dev_id))
                    rdescs.append((raddr, s.item_len, d.dev_id))
                    expect.append((i, p, s.addr + p * s.item_len, s.item_len))
                if problem:
                    break
            if problem:
                fail(*problem)
                all_ok = False
                continue
            local_kind = src_regions[start].reg_kind
            try:
                lh = agent.nixl.prep_xfer_dlist("NIXL_INIT_AGENT", local, local_kind, backends=[job["backend"]])
            except Exception as exc:
                fail(
                    "probe-registration-failed",
                    f"segment {si}: local {local_kind} descriptors: {error_class(exc)}: {exc}",
                )
                all_ok = False
                continue
            try:
                rh = agent.nixl.prep_xfer_dlist(remote, rdescs, reg_kind_remote, backends=[job["backend"]])
            except Exception as exc:
                fail(
                    "probe-remote-unregistered",
                    f"segment {si}: {meta.name!r} has no registered {reg_kind_remote} memory covering the "
                    f"{len(rdescs)} destination pages: {error_class(exc)}: {exc}",
                )
                lh.release()
                all_ok = False
                continue
            idx = list(range(len(local)))
            views = []
            for i, p, addr, ln in expect:
                buf = (ctypes.c_uint8 * ln).from_address(addr)
                v = np.frombuffer(buf, dtype=np.uint8)
                views.append(v)
                _fill(v, _pattern(nonce, i, p))
            emit(type="step_done", step=f"prepare segment {si}", seconds=time.perf_counter() - t)

            _hold(job, f"write segment {si}", timeout)
            # Warm the path with one page (no notification), so latency is the segment's transfer.
            hw = agent.nixl.make_prepped_xfer("WRITE", lh, [0], rh, [0], b"")
            if agent.nixl.transfer(hw) != "DONE":
                _wait(agent.nixl, hw, timeout, f"warm-up segment {si}")
            hw.release()
            ping = None
            for _ in range(PING_COUNT):
                hp = agent.nixl.make_prepped_xfer("WRITE", lh, [0], rh, [0], b"")
                tp = time.perf_counter()
                if agent.nixl.transfer(hp) != "DONE":
                    _wait(agent.nixl, hp, timeout, f"ping segment {si}")
                dt = time.perf_counter() - tp
                hp.release()
                ping = dt if ping is None else min(ping, dt)
            begin(f"write segment {si}")
            h = agent.nixl.make_prepped_xfer("WRITE", lh, idx, rh, idx, notif)
            t0 = time.perf_counter()
            state = agent.nixl.transfer(h)
            if state == "ERR":
                raise RuntimeError("transfer post returned ERR")
            lat = _wait(agent.nixl, h, timeout, f"write segment {si}") if state != "DONE" else time.perf_counter() - t0
            backend_used = None
            try:
                backend_used = agent.nixl.query_xfer_backend(h)
            except Exception:
                pass
            h.release()
            nbytes = sum(x[3] for x in expect)

            _hold(job, f"read back segment {si}", timeout)
            begin(f"read back segment {si}")
            for v in views:
                v[:] = 0
            h2 = agent.nixl.make_prepped_xfer("READ", lh, idx, rh, idx, b"")
            state = agent.nixl.transfer(h2)
            if state == "ERR":
                raise RuntimeError("read-back post returned ERR")
            if state != "DONE":
                _wait(agent.nixl, h2, timeout, f"read back segment {si}")
            h2.release()
            bad = [
                (i, p) for (i, p, _, _), v in zip(expect, views, strict=False) if not _check(v, _pattern(nonce, i, p))
            ]
            lh.release()
            rh.release()
            seg = {
                "index": si,
                "start": start,
                "end": end,
                "src_kind": src_kind,
                "dst_kind": dst_kind,
                "registered_as": [local_kind, reg_kind_remote],
                "bytes": nbytes,
                "pages": len(expect),
                "latency_s": lat,
                "bandwidth_Bps": nbytes / lat if lat > 0 else None,
                "notification": notif.decode(),
                "verified": not bad,
                "backend": backend_used,
                "ping_s": ping,
            }
            emit(type="segment", segment=seg)
            if bad:
                all_ok = False
                fail(
                    "probe-data-mismatch",
                    f"segment {si}: {len(bad)} of {len(expect)} pages read back differ (first: region {bad[0][0]} "
                    f"page {bad[0][1]})",
                )
        emit(type="end", ok=all_ok)
        return
    except _Hung as h:
        fail(
            "probe-timeout",
            f"step '{h.step}' did not finish within {h.seconds:g} s (--timeout); the transfer handle was released",
        )
        emit(type="end", ok=False)
    except Exception as exc:  # every failure becomes a named finding
        from kvcheck.errors import UnreachableError

        name = error_class(exc)
        if isinstance(exc, UnreachableError):
            fid = "probe-timeout" if "deadline" in str(exc) or "within" in str(exc) else "probe-peer-lost"
            fail(fid, f"step '{step}': {exc}")
        elif name in ("nixlRemoteDisconnectError", "nixlNotFoundError", "nixlBackendError") or "ERR" in str(exc):
            fail("probe-peer-lost", f"step '{step}': the decode-role agent went away ({name}: {exc})")
        else:
            fail("probe-error", f"step '{step}': {name}: {exc}")
        emit(type="end", ok=False)
    finally:
        if remote is not None:
            try:
                agent.nixl.remove_remote_agent(remote)
            except Exception:
                pass


def main() -> None:
    """Child entry point: read the job (JSON) from stdin, report JSON lines on stdout."""
    from kvcheck.nixl.runtime import json_channel

    global _OUT
    _OUT = json_channel()  # NIXL/UCX logging to stderr; events alone on stdout
    job = json.loads(sys.stdin.readline())
    code = _child(job)
    sys.stdout.flush()
    os._exit(code)  # skip NIXL/UCX teardown, which can block on a dead peer


if __name__ == "__main__":
    main()
