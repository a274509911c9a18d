#!/usr/bin/env python3
"""Extract the PD-path facts of SGLang releases into kvcheck/sglang/pd_facts.json.

Usage: gen_pd_facts.py DIR [DIR ...]   (each DIR, named after the release such as 0.5.8.post1,
holds that release unpacked: DIR/sglang/...)

Reads each release's own ``sglang/srt/disaggregation`` sources with ``ast`` (nothing is
imported) and records, per release, the facts kvcheck's PD model branches on:

- ``route``: how the decode asks the prefill bootstrap server for its parallel info
  (``"v2"``: ``/route?prefill_dp_rank=-1&prefill_cp_rank=-1&...`` read into
  ``PrefillServerInfo(**data)``; ``"v1"``: ``/route?engine_rank=-1&target_dp_group=-1...``
  read key by key), the ``PrefillServerInfo`` fields the decode accepts and the keys the
  prefill's ``_handle_route_get`` sends (``asdict`` of its ``PrefillServerInfo``, minus the
  keys it pops when None);
- ``registration``: the frames ``KVArgsRegisterInfo.from_zmq`` reads and the number of
  frames after ``GUARD`` the decode's registration sends, and where ``gpu_id`` sits;
- ``bootstrap_hash``/``decision_hash``: digests of the decode's bootstrap checks
  (``try_ensure_parallel_info`` + ``_resolve_rank_mapping``; before 0.5.10
  ``CommonKVReceiver.__init__`` + ``_get_prefill_parallel_info_from_server``) and of the
  prefill's registration decision (``_add_remote_peer``, ``_prepare_payload_xfer`` and
  helpers; before 0.5.13, which prepare nothing at registration, the per-request
  ``add_transfer_request`` / ``send_kvcache`` / ``send_kvcache_slice`` path, digest
  prefixed ``pr-``), so that a release whose code kvcheck has not restated is recognised
  as such;
- ``strings``: whether a runtime message or function exists in that release.

Later releases are added by running this script on them (``pip download --no-deps
sglang==X`` and unzip) and reviewing what changed.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "kvcheck" / "sglang" / "pd_facts.json"
DISAGG = "sglang/srt/disaggregation"
STRINGS = {
    "no_segments_guard": "has no KV memory segments",
    "pp_mla_offsets": "PP-heterogeneous MLA transfer",
    "aux_count_check": "def check_peer_aux_buffer_count",
    "mem_segments": "def _kv_xfer_mem_segments",
    "hetero_tp_host_guard": "heterogeneous-TP direct-to-host KV transfer",
    "dcp_relayout": "Unsupported PD DCP topology",
    "prepared_state": "def _prepare_state_xfer",
    "decode_only_spec_guard": "HiSparse combined with decode-only speculative decoding",
    "region_count_guard": "decode registered fewer KV regions",
    "item_stride_guard": "transfer length exceeds item stride",
}
BOOTSTRAP_FUNCS = ("try_ensure_parallel_info", "_resolve_rank_mapping")
# Releases before 0.5.13 prepare nothing at registration: the prefill builds descriptor
# lists per request (``add_transfer_request`` -> ``send_kvcache`` / ``send_kvcache_slice``,
# pairing regions with ``get_mha_kv_ptrs_with_pp`` / ``get_mla_kv_ptrs_with_pp``); their
# ``decision_hash`` digests these instead (``_prepare_payload_xfer`` absent).
PER_REQUEST_FUNCS = (
    "add_transfer_request", "transfer_worker", "send_kvcache", "_send_kvcache_generic", "send_kvcache_slice",
    "get_mha_kv_ptrs_with_pp", "get_mla_kv_ptrs_with_pp", "_mla_slice_ptrs_for_pp", "register_buffer_to_engine",
)
# Before 0.5.10 the decode checks the prefill in ``CommonKVReceiver.__init__`` over the v1
# ``/route``; its ``bootstrap_hash`` digests that constructor and the v1 fetch.
V1_BOOTSTRAP_METHODS = (("CommonKVReceiver", "__init__"), ("CommonKVReceiver", "_get_prefill_parallel_info_from_server"))
DECISION_FUNCS = (
    "_add_remote_peer", "_prepare_payload_xfer", "_build_transfer_dst_indices", "_kv_xfer_mem_segments",
    "_init_equal_tp_prep_handle", "_init_mixed_equal_tp_prep_handles", "_prep_equal_tp_dlist", "_prep_xfer_dlist",
    "_homogeneous_kv_mem_kind", "build_transfer_entry_pairs", "requires_dcp_relayout", "prepare_dcp_token_item_lens",
)


def _defs(tree: ast.AST) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, node)
    return out


def _digest(defs: dict[str, ast.AST], names) -> str:
    h = hashlib.sha256()
    for name in names:
        node = defs.get(name)
        h.update(name.encode() + b"\0" + (ast.unparse(node).encode() if node is not None else b"-") + b"\0")
    return h.hexdigest()[:12]


def _method_digest(trees: list[ast.AST], methods) -> str:
    """Digest of ``Class.method`` sources (the first class of that name in ``trees``)."""
    h = hashlib.sha256()
    for cls, name in methods:
        node = None
        for tree in trees:
            for c in ast.walk(tree):
                if node is None and isinstance(c, ast.ClassDef) and c.name == cls:
                    node = next((f for f in c.body if isinstance(f, ast.FunctionDef) and f.name == name), None)
        h.update(f"{cls}.{name}".encode() + b"\0" + (ast.unparse(node).encode() if node is not None else b"-") + b"\0")
    return h.hexdigest()[:12]


def _dataclass_fields(node: ast.ClassDef | None) -> list[str] | None:
    if node is None:
        return None
    return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def facts(root: Path) -> dict:
    d = root / DISAGG
    texts = {p: (d / p).read_text() for p in ("common/conn.py", "nixl/conn.py", "utils.py") if (d / p).exists()}
    defs: dict[str, ast.AST] = {}
    for p in ("utils.py", "common/conn.py", "nixl/conn.py"):  # nixl wins on name clashes
        if p in texts:
            defs.update(_defs(ast.parse(texts[p])))
    all_text = "\n".join(texts.values())
    common = texts.get("common/conn.py", "")
    route = "v2" if "prefill_cp_rank={-1}" in common else "v1"
    info = _dataclass_fields(defs.get("PrefillServerInfo"))
    pops = sorted(set(re.findall(r"payload\.pop\(\s*[\"'](\w+)[\"']", common)))
    reg = defs.get("KVArgsRegisterInfo")
    reads = sorted({int(m) for m in re.findall(r"msg\[(\d+)\]", ast.unparse(reg))}) if reg else []
    gpu_at = None
    if reg:
        m = re.search(r"gpu_id=int\(msg\[(\d+)\]", ast.unparse(reg))
        gpu_at = int(m.group(1)) if m else None
    sent = None
    for node in ast.walk(ast.parse(texts.get("nixl/conn.py", ""))):
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Name) and node.elts[0].id == "GUARD":
            src = ast.unparse(node)
            if "'None'.encode" in src or '"None".encode' in src:
                sent = max(sent or 0, len(node.elts) - 1)
    return {
        "route": route,
        "route_accepts": info,
        "route_sends": [f for f in info] if info is not None else None,
        "route_pops_when_none": pops,
        "registration_reads": reads,
        "registration_sends": sent,
        "registration_gpu_id_frame": gpu_at,
        "bootstrap_hash": (
            _digest(defs, BOOTSTRAP_FUNCS) if "try_ensure_parallel_info" in defs
            else _method_digest([ast.parse(common)], V1_BOOTSTRAP_METHODS) if "_get_prefill_parallel_info_from_server" in common else None
        ),
        "decision_hash": _digest(defs, DECISION_FUNCS) if "_prepare_payload_xfer" in defs else "pr-" + _digest(defs, PER_REQUEST_FUNCS),
        "strings": {k: (v in all_text) for k, v in STRINGS.items()},
    }


def main(argv: list[str]) -> int:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    for arg in argv:
        root = Path(arg)
        data[root.name] = facts(root)  # the folder is named after the release ("0.5.8.post1")
    ordered = {v: data[v] for v in sorted(data, key=lambda v: [int(x) for x in re.findall(r"\d+", v)])}
    OUT.write_text(json.dumps(ordered, indent=1, sort_keys=False) + "\n")
    print(f"wrote {len(ordered)} releases to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
