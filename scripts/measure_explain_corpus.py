#!/usr/bin/env python3
"""Measure ``kvcheck explain`` on collected real logs (issue 20).

The logs live outside the repository (``/work/corpus/logs/<id>/{log.txt,meta.json}``,
collected from public threads; never committed). ``meta.json`` holds the cause the
thread established (``cause_code``; ``unknown`` when it did not), the engine, the phase.

Grades per log with an established cause:
- ``right``: kvcheck's first cause is the established one;
- ``message``: the established failure is among kvcheck's findings (or its stated cause
  lists it among candidates) but the first cause is another;
- ``wrong``: kvcheck states a first cause that is not the established one and does not
  find it;
- ``located``: no stated cause is the established one, but kvcheck's first finding is a
  general rule's (``generic.py``: component and meaning, no specific signature) whose phase
  is the thread's: the on-call engineer is told where to look, not why;
- ``none``: nothing recognized.
Also counted on every log: catalog (SGLang) explanations given to lines of a log whose
engine is not SGLang ("explained as SGLang's"), and, for crash/known signatures, whether
the phase kvcheck states is the thread's.

Usage: python scripts/measure_explain_corpus.py [--split dev|heldout|all] [--corpus DIR] [--round N]
       [--leave-out 2,3] [-v]

``--leave-out R``: run without the signatures written for round R's logs (``ROUND_SIGNATURES``,
through the ``KVCHECK_EXPLAIN_DISABLE`` hook): what the general rules catch of logs whose
specific signatures were written after reading them (leave-one-round-out).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

# corpus cause codes -> the kvcheck finding ids that state that cause
ALIASES = {
    "swa-hetero-tp-refused": {"state-tp-unsupported"},
    "mamba-hetero-tp-refused-nixl": {"state-tp-unsupported-mamba"},
    "decode-radix-spec-refused": {"decode-radix-speculative"},
    "mooncake-tcp-device-memory": {"mooncake-tcp-transport"},
    "mooncake-tcp-transport-failure": {"mooncake-tcp-transport"},
    "mooncake-multi-nic-handshake": {"mooncake-qp-rtr-handshake"},
    "mooncake-sticky-failed-session": {"mooncake-session-failed"},
    "prefill-warmup-vlm-400": {"prefill-warmup-vlm"},
    "mooncake-nvlink-fallback-no-rdma-in-container": {"mooncake-nvlink-fallback-address"},
    "mooncake-mnnvl-no-hca": {"mooncake-no-rdma-fallback"},
    "deepep-no-mlx5-on-efa": {"crash-outside-transfer"},
    "ucx-device-qp-unusable": {"ucx-device-qp-unusable"},
    "ascend-direct-not-enabled": {"mooncake-ascend-direct-connect"},
    "ucx-no-cuda-transports": {"nixl-register-vram-backend-error"},
    "ucx-tcp-device-memory": {"ucx-segv-device-memory-as-host"},
    "mooncake-nic-gpu-pcie-affinity": {"mooncake-local-protection-error"},
    "ucx-gb300-cuda13-protocol": {"ucx-no-remote-protocol"},
    # round 2
    "nixl-plugin-dir-wrong": {"nixl-no-plugins-loaded"},
    "nixl-multiple-installations": {"nixl-multiple-installations", "nixl-backend-plugin-not-found"},
    "nixl-cu12-cu13-clobber": {"nixl-cuda-major-wheel-mismatch"},
    "mooncake-faulty-local-nic": {"mooncake-retry-exceeded-local-nic"},
    "moriio-read-mode-out-of-order": {"mori-control-plane-regendpoint-assert"},
    "mooncake-ipv6-only-gids": {"mooncake-gid-selection-failed"},
    "mooncake-gid-null-roce": {"mooncake-gid-selection-failed"},
    "sglang-wrong-bootstrap-port": {"sglang-receiver-init-no-bootstrap-info"},
    "mooncake-no-rdma-device": {"mooncake-no-rdma-fallback", "mooncake-no-peermem-no-rnic", "rdma-devices-not-visible"},
    # round 4 (aliases set from the threads' causes and the finding ids' meanings)
    "rdma-memlock-ulimit": {"rdma-register-enomem"},
    "mooncake-gpu-memory-registration": {"rdma-register-gpu-memory"},
    "nixl-wheel-needs-cuda-libs": {"native-plugin-missing-library"},
    "mooncake-ipv6-host-handshake": {"peer-address-ipv6-literal"},
    "nixl-too-old-for-engine": {"nixl-too-old-for-engine", "api-version-mismatch"},
    "dynamo-sglang-version-mismatch": {"dynamo-sglang-version-mismatch", "api-version-mismatch"},
    "ucx-no-cuda-transports": {"nixl-register-vram-backend-error", "nixl-ucx-vram-detected-as-host"},
    # round 7
    "vllm-handshake-after-peer-crash": {"vllm-handshake-after-peer-crash", "vllm-nixl-handshake-failed-blocks-invalid"},
    "prefill-bootstrap-port-per-node-mismatch": {"mooncake-receiver-no-bootstrap-infos"},
    # round 6
    "trtllm-cache-transceiver-config-unset": {"trtllm-cache-transceiver-config-unset", "trtllm-cache-transceiver-disabled-assert"},
    "mooncake-tcp-device-memory": {"mooncake-tcp-transport", "mooncake-tcp-fallback-sglang-gpu-kv"},
    "mooncake-no-rdma-device": {"mooncake-no-rdma-fallback", "mooncake-no-peermem-no-rnic", "rdma-devices-not-visible"},
}
# the signatures written for each round's logs (git diff of signatures.yaml at that round)
ROUND_SIGNATURES = {
    2: ["dynamo-sglang-version-mismatch", "mooncake-memcpy-pool-cross-process", "mooncake-qp-allocation-exhausted",
        "mooncake-retry-exceeded-local-nic", "mooncake-wrong-ib-device", "mori-control-plane-regendpoint-assert",
        "mori-mamba-replicated-hetero-tp", "mori-pp-descriptor-mismatch", "mori-sparse-state-pp", "mori-swa-hetero-tp-refused",
        "nixl-backend-plugin-not-found", "nixl-cuda-major-wheel-mismatch", "nixl-libfabric-plugin-no-efa", "nixl-no-plugins-loaded",
        "nixl-too-old-for-engine", "nixl-ucx-requests-canceled", "rdma-core-userspace-kernel-mismatch",
        "sglang-receiver-init-no-bootstrap-info", "trtllm-cache-transceiver-config-unset", "trtllm-cachestate-mismatch",
        "trtllm-nixl-libfabric-rail-mismatch", "ucx-dmabuf-registration-failed", "vllm-nixl-reqs-to-send-keyerror"],
    3: ["mooncake-gid-selection-failed"],
    4: ["nixl-ucx-vram-detected-as-host"],
    6: ["mooncake-tcp-fallback-sglang-gpu-kv", "trtllm-cache-transceiver-disabled-assert"],
    7: ["ucx-net-devices-excludes-ip-device", "vllm-nixl-handshake-failed-blocks-invalid",
        "mooncake-receiver-no-bootstrap-infos"],
}
# findings whose stated cause lists the established one among candidates
CANDIDATES = {
    "nixl-create-backend-failed": {"ucx-not-multithreaded", "ucx-bundled-vs-system-conflict"},
    "trtllm-nixl-agent-assert": {"nixl-multiple-installations"},
    "nixl-remote-disconnect": {"concurrent-add-remote-agent", "vllm-remote-disconnect-prefill-died"},
    "nixl-ucx-requests-canceled": {"vllm-nixl-reqs-to-send-keyerror"},
    "nixl-err-backend-generic": {"ucx-bundled-vs-system-conflict", "ucx-not-multithreaded", "ucx-no-cuda-transports"},
    "nixl-register-mem-failed": {"ucx-no-cuda-transports"},
    "nixl-backend-plugin-not-found": {"nixl-plugin-dir-wrong", "nixl-multiple-installations"},
    "rdma-devices-not-visible": {"mooncake-ib-devpath-check-regression"},
    "rdma-wc-retry-exc-err": {"mooncake-faulty-local-nic", "mooncake-multi-nic-handshake"},
    "rdma-wc-loc-prot-err": {"mooncake-nic-gpu-pcie-affinity"},
}
SGLANG_ENGINES = {"sglang", "sglang-nixl", "sglang-mooncake", "sglang-mori", "dynamo-sglang"}
import re

CRASH = re.compile(r"Caught signal \d+|Segmentation fault|Segfault encountered|Assertion .*failed|bitmap\.h:\d+")
SAME_PHASE = {("first-request", "first-transfer"), ("first-transfer", "first-request")}


def _unknown(meta: dict) -> bool:
    """No established cause: ``unknown`` or ``unknown-<what the log shows>``."""
    return meta["cause_code"].startswith("unknown")


def grade(meta: dict, report) -> str:
    code = meta["cause_code"]
    ok = ALIASES.get(code, set()) | {code}
    if report is None or not report.findings:
        return "none"
    first = report.first_cause
    if first is not None and first.id in ok:
        return "right"
    if any(f.id in ok for f in report.findings) or any(code in CANDIDATES.get(f.id, ()) for f in report.findings):
        return "message"
    if first is not None and first.kind == "generic" and first.id.endswith("-generic") and (
            not meta.get("phase") or first.phase == meta["phase"] or (first.phase, meta["phase"]) in SAME_PHASE):
        return "located"
    return "wrong"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=Path("/work/corpus/logs"))
    ap.add_argument("--split", default="dev", choices=["dev", "heldout", "all"])
    ap.add_argument("--round", type=int, default=None,
                    help="only logs collected in this round (meta added_round; the first round has none)")
    ap.add_argument("--leave-out", default="", help="rounds whose signatures are disabled, e.g. 2,3")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args(argv)
    if args.leave_out:
        import os
        off = [sid for r in args.leave_out.split(",") for sid in ROUND_SIGNATURES.get(int(r), [])]
        os.environ["KVCHECK_EXPLAIN_DISABLE"] = ",".join(off)
    from kvcheck.explain.matcher import explain_text

    rows = []
    for d in sorted(args.corpus.iterdir()):
        if not (d / "meta.json").exists():
            continue
        meta = json.loads((d / "meta.json").read_text())
        if args.split != "all" and meta["split"] != args.split:
            continue
        if args.round is not None and meta.get("added_round", 1) != args.round:
            continue
        text = (d / "log.txt").read_text(errors="replace")
        res = explain_text(text, source="log")
        rep = res.report
        foreign_as_sglang = 0
        if meta["engine"] not in SGLANG_ENGINES:
            foreign_as_sglang = sum(f.count for f in rep.findings if f.kind == "catalog" and f.engine == "sglang")
        g = grade(meta, rep) if not _unknown(meta) else ("recognized" if rep.findings or res.foreign else "unrecognized")
        phase_ok = None
        first = rep.first_cause
        if first is not None and meta.get("phase") and first.kind == "signature":
            phase_ok = first.phase == meta["phase"] or (first.phase, meta["phase"]) in SAME_PHASE
        crash = None
        if meta["engine"] in SGLANG_ENGINES | {"nixl", "ucx"} and CRASH.search(text):
            sig = first if (first is not None and first.kind == "signature") else None
            crash = bool(sig) and sig.id not in ("ucx-signal-generic", "python-segfault-generic") and (
                not meta.get("phase") or sig.phase == meta["phase"] or (sig.phase, meta["phase"]) in SAME_PHASE)
        rows.append((meta, g, foreign_as_sglang, phase_ok, rep, crash))
        if args.v:
            fc = f"{first.id} [{first.phase}]" if first else "-"
            print(f"{meta['id']:<22} {meta['engine']:<16} {g:<10} want={meta['cause_code']:<36} got={fc}  release={rep.release.text()[:60]}")
    by_engine: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for meta, g, *_ in rows:
        fam = "sglang" if meta["engine"] in SGLANG_ENGINES else meta["engine"]
        by_engine[fam][g] += 1
    cols = ["right", "message", "located", "wrong", "none", "recognized", "unrecognized"]
    print(f"\n{len(rows)} logs ({args.split}); established causes: {sum(1 for m, *_ in rows if not _unknown(m))}")
    print("| engine | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    total: collections.Counter = collections.Counter()
    for fam in sorted(by_engine):
        total.update(by_engine[fam])
        print(f"| {fam} | " + " | ".join(str(by_engine[fam][c]) for c in cols) + " |")
    print("| **all** | " + " | ".join(str(total[c]) for c in cols) + " |")
    est = sum(total[c] for c in ("right", "message", "located", "wrong", "none"))
    print(f"\nright cause: {total['right']}/{est} ({100 * total['right'] / max(est, 1):.0f}%)")
    print(f"right, or the cause among the stated candidates, or located (component + phase): "
          f"{total['right'] + total['message'] + total['located']}/{est}; not recognized: {total['none']}")
    print(f"catalog (SGLang) explanations given to another engine's lines: {sum(r[2] for r in rows)}")
    ph = [r[3] for r in rows if r[3] is not None]
    print(f"crash/known signatures as first cause with the thread's phase: {sum(ph)}/{len(ph)}")
    cr = [r[5] for r in rows if r[5] is not None]
    print(f"SGLang/NIXL/UCX crash logs (signal, segfault, assertion) named by a specific signature with the thread's phase: {sum(cr)}/{len(cr)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
