"""srt-slurm recipes -> one ``Deployment`` per variant, workers rendered as srt-slurm does.

Mirrors NVIDIA/srt-slurm (``src/srtctl``, commit c88ef731 and its neighbours):

* variants: ``sweep:`` (``core/sweep.py``: the Cartesian product of the listed values,
  ``{param}`` placeholders replaced in every string, name ``{name}_{k}{v}_...``) and
  ``base`` + ``override_<x>`` / ``zip_override_<x>`` (``core/config.py``:
  ``deep_merge`` where ``null`` deletes a key, zip over list leaves with length-1 lists
  broadcast; the base alone is not a variant);
* workers: ``resources.prefill_workers/decode_workers/prefill_nodes/decode_nodes/
  gpus_per_node`` (default 4) and the explicit ``gpus_per_prefill/gpus_per_decode``, or the
  newer ``roles.<prefill|decode>.{workers,nodes,gpus,env,args,container}``; GPUs per
  worker as ``ResourceConfig.gpus_per_prefill/decode`` (``nodes*gpus_per_node//workers``,
  a decode with ``decode_nodes: 0`` inheriting the prefill worker size);
* placement: ``core/topology.py`` ``allocate_endpoints`` (prefill first, packed on
  nodes; decode starting on a fresh node unless none is left) and
  ``endpoints_to_processes`` (per-node HTTP ports from 6100 step 32, per-node bootstrap
  ports from 7200 for prefill leaders, one Dynamo system port per process from 7500,
  ``--nccl-port`` = 17500 + system port - 7500);
* the command: ``backends/sglang.py`` ``build_worker_command``: ``python3 -m
  dynamo.sglang`` (or ``sglang.launch_server`` when ``frontend.type: sglang``)
  ``--model-path`` (the hub id for ``hf:`` paths, else ``/model``, where the model is
  mounted) ``--served-model-name --host 0.0.0.0 --port --nccl-port --disaggregation-mode``
  [``--disaggregation-bootstrap-port`` on prefill] [``--dist-init-addr LEADER:8300 --nnodes
  --node-rank`` on multi-node workers] [``--request-plane`` for Dynamo] then the
  ``sglang_config`` section of the mode, sorted, keys as flags, ``true`` -> bare flag,
  ``false``/``null`` dropped, lists as several values. srt-slurm passes no
  ``--disaggregation-transfer-backend``: SGLang's default applies.

Node names are ``node0``, ``node1``... (the real ones come from Slurm at run time). The
container (``model.container``: an image or a cluster alias such as ``0.5.6.post2``)
goes to ``Instance.image``; the model alias (``model.path``) to ``Instance.model``. A
worker's environment: its mode's (``backend.<mode>_environment``, ``roles.<mode>.env``),
then the recipe's top-level ``environment`` over it.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.sglang.gpu import normalize_gpu_name
from kvcheck.sources.deployments.instance import Deployment, Location
from kvcheck.sources.deployments.launch import DYNAMO_MODULE, Launch, instance_from_launch
from kvcheck.sources.deployments.shell import Word
from kvcheck.sources.deployments.yamlnodes import LMap, LSeq, sub_map
from kvcheck.sources.limits import cap, check_cap

HTTP_PORT_BASE, HTTP_PORT_STRIDE = 6100, 32
BOOTSTRAP_PORT_BASE = 7200
DIST_INIT_PORT = 8300
SYS_PORT_BASE = 7500
NCCL_PORT_BASE = 17500


def is_recipe(doc: Any) -> bool:
    """A mapping that looks like an srt-slurm recipe (or an override file)."""
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("base"), dict) and any(str(k).startswith(("override_", "zip_override_")) for k in doc):
        return is_recipe(doc["base"])
    backend = doc.get("backend")
    if isinstance(backend, dict) and ("sglang_config" in backend or backend.get("type") == "sglang"):
        return True
    return (
        isinstance(doc.get("resources"), dict)
        and isinstance(doc.get("model"), dict)
        and ("roles" in doc or "backend" in doc)
    )


# -- variants --------------------------------------------------------------------------


def _copy_lines(dst: Any, src: Any) -> None:
    if isinstance(src, LMap) and isinstance(dst, LMap):
        dst.line = src.line
    if isinstance(src, LSeq) and isinstance(dst, LSeq):
        dst.line = src.line


def deep_merge(base: Any, override: Any) -> Any:
    """srt-slurm ``core.config.deep_merge`` (dicts recursive, lists replaced, ``None``
    deletes), keeping each value's source line."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            result.pop(key, None)
            if isinstance(result, LMap):
                result.lines.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
            if isinstance(result, LMap) and isinstance(override, LMap):
                result.lines[key] = override.line_of(key)
    return result


def _zip_len(d: dict, source: str, line: int) -> int:
    lengths: list[int] = []

    def collect(x: dict) -> None:
        for v in x.values():
            if isinstance(v, list):
                lengths.append(len(v))
            elif isinstance(v, dict):
                collect(v)

    collect(d)
    if not lengths or 0 in lengths:
        raise InputError(f"zip_override section at line {line} has no non-empty list to zip", source=source)
    n = {x for x in lengths if x != 1}
    if len(n) > 1:
        raise InputError(
            f"zip_override section at line {line} has lists of different lengths {sorted(n)}", source=source
        )
    return n.pop() if n else 1


def _zip_slice(d: Any, i: int) -> Any:
    out = LMap()
    _copy_lines(out, d)
    for k, v in d.items():
        if isinstance(v, list):
            out[k] = v[0 if len(v) == 1 else i]
            if isinstance(d, LMap):
                out.lines[k] = v.line_of(0 if len(v) == 1 else i) if isinstance(v, LSeq) else d.line_of(k)
        elif isinstance(v, dict):
            out[k] = _zip_slice(v, i)
            if isinstance(d, LMap):
                out.lines[k] = d.line_of(k)
        else:
            out[k] = v
            if isinstance(d, LMap):
                out.lines[k] = d.line_of(k)
    return out


def _expand_template(t: Any, values: dict[str, Any]) -> Any:
    """srt-slurm ``core.sweep.expand_template``: ``{param}`` -> value in every string."""
    if isinstance(t, dict):
        out = LMap({k: _expand_template(v, values) for k, v in t.items()})
        if isinstance(t, LMap):
            out.lines = dict(t.lines)
            out.line = t.line
        return out
    if isinstance(t, list):
        out_l = LSeq([_expand_template(v, values) for v in t])
        if isinstance(t, LSeq):
            out_l.lines = list(t.lines)
            out_l.line = t.line
        return out_l
    if isinstance(t, str):
        result = t
        for key, value in values.items():
            ph = "{" + str(key) + "}"
            if isinstance(value, list):
                if result == ph:
                    return value
                result = result.replace(ph, ",".join(str(v) for v in value))
            else:
                result = result.replace(ph, str(value))
        return result
    return t


def variants(doc: LMap, source: str) -> list[tuple[str | None, Any]]:
    """(variant name or None, config) for each job the recipe submits."""
    if isinstance(doc.get("base"), dict) and any(str(k).startswith(("override_", "zip_override_")) for k in doc):
        base = doc["base"]
        out: list[tuple[str | None, Any]] = []
        for key in sorted(k for k in doc if str(k).startswith("override_")):
            ov = doc[key]
            if not isinstance(ov, dict):
                continue
            merged = deep_merge(base, ov)
            suffix = key[len("override_") :]
            if "name" not in ov:
                merged["name"] = f"{base.get('name', 'unnamed')}_{suffix}"
            out.append((key, merged))
        for key in sorted(k for k in doc if str(k).startswith("zip_override_")):
            z = doc[key]
            if not isinstance(z, dict):
                continue
            group = key[len("zip_override_") :]
            n = _zip_len(z, source, doc.line_of(key))
            check_cap("variants", len(out) + n, field=key, source=source, line=doc.line_of(key))
            for i in range(n):
                merged = deep_merge(base, _zip_slice(z, i))
                if not isinstance(z.get("name"), list):
                    merged["name"] = f"{base.get('name', 'unnamed')}_{group}_{i}"
                out.append((f"{key}[{i}]", merged))
        expanded: list[tuple[str | None, Any]] = []
        check_cap("variants", len(out), field="override_*", source=source)
        for name, cfg in out:
            for sub, c in _sweeps(cfg, source, len(expanded)):
                expanded.append((name if sub is None else f"{name} {sub}", c))
        return expanded
    return _sweeps(doc, source)


def _sweeps(cfg: Any, source: str | None = None, before: int = 0) -> list[tuple[str | None, Any]]:
    sweep = cfg.get("sweep") if isinstance(cfg, dict) else None
    if not isinstance(sweep, dict) or not sweep:
        return [(None, cfg)]
    names = list(sweep.keys())
    lists = [sweep[n] if isinstance(sweep[n], list) else [sweep[n]] for n in names]
    _check_sweep_size(lists, before, source, getattr(cfg, "line_of", lambda k: None)("sweep"))
    out: list[tuple[str | None, Any]] = []
    for k, combo in enumerate(itertools.product(*lists)):
        params = dict(zip(names, combo, strict=False))
        c = LMap({kk: v for kk, v in cfg.items() if kk != "sweep"})
        _copy_lines(c, cfg)
        if isinstance(cfg, LMap):
            c.lines = {kk: v for kk, v in cfg.lines.items() if kk != "sweep"}
        c = _expand_template(c, params)
        c["name"] = f"{cfg.get('name', 'unnamed')}_" + "_".join(f"{kk}{v}" for kk, v in params.items())
        out.append((f"sweep[{k}] " + " ".join(f"{kk}={v}" for kk, v in params.items()), c))
    return out


def _check_sweep_size(lists: list[list[Any]], before: int, source: str | None, line: int | None) -> None:
    """The number of sweep combinations (the product of the value lists' lengths, plus the
    ``before`` variants already made) against the variants cap, before any is built."""
    total = 1
    for values in lists:
        total *= max(1, len(values))
        if total > cap("variants"):
            break
    check_cap("variants", before + total, field="sweep", source=source, line=line)


# -- topology ---------------------------------------------------------------------------


def _check_topology(
    p_workers: int,
    d_workers: int,
    p_nodes: int | None,
    d_nodes: int | None,
    gp: int,
    gd: int,
    gpn: int,
    file: str,
    line: int,
) -> None:
    """Workers and nodes of a recipe against kvcheck's caps, before any is allocated:
    workers (instances), ``*_nodes`` and the nodes the workers span (GPUs per worker over
    GPUs per node)."""
    for field, value in (("resources.prefill_workers", p_workers), ("resources.decode_workers", d_workers)):
        check_cap("instances", value, field=field, source=file, line=line)
    check_cap(
        "instances", p_workers + d_workers, field="resources.prefill_workers + decode_workers", source=file, line=line
    )
    for field, nodes in (("resources.prefill_nodes", p_nodes), ("resources.decode_nodes", d_nodes)):
        check_cap("nodes", nodes, field=field, source=file, line=line)
    spanned = sum(w * max(1, -(-max(g, 1) // max(gpn, 1))) for w, g in ((p_workers, gp), (d_workers, gd)))
    check_cap("nodes", spanned, field="resources (GPUs per worker / gpus_per_node x workers)", source=file, line=line)
    check_cap(
        "nodes", (p_nodes or 0) + (d_nodes or 0), field="resources.prefill_nodes + decode_nodes", source=file, line=line
    )


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _allocate(counts: list[tuple[str, int, int]], gpn: int, nodes: list[str]) -> list[tuple[str, int, tuple[str, ...]]]:
    """srt-slurm ``allocate_endpoints`` (``allocate_workers_simple``): (mode, index, nodes)."""
    node_idx, offset = 0, 0
    out: list[tuple[str, int, tuple[str, ...]]] = []

    def node(i: int) -> str:
        return nodes[i] if i < len(nodes) else f"node{i}"

    for mode, count, gpw in counts:
        if count <= 0:
            continue
        if mode == "decode" and offset > 0 and (node_idx + 1) < len(nodes):
            node_idx += 1
            offset = 0
        per = max(1, -(-gpw // gpn))
        for i in range(count):
            if gpw >= gpn:
                out.append((mode, i, tuple(node(node_idx + j) for j in range(per))))
                node_idx += per
            else:
                if offset + gpw > gpn:
                    node_idx += 1
                    offset = 0
                out.append((mode, i, (node(node_idx),)))
                offset += gpw
                if offset >= gpn:
                    node_idx += 1
                    offset = 0
    return out


def _config_to_cli(config: Any, line_of_key: Any) -> list[tuple[str, int | None]]:
    """srt-slurm ``_config_to_cli_args``: sorted keys, ``_`` -> ``-``, bools bare."""
    out: list[tuple[str, int | None]] = []
    for key, value in sorted(config.items(), key=lambda kv: str(kv[0])):
        flag = "--" + str(key).replace("_", "-")
        line = line_of_key(key)
        if isinstance(value, bool):
            if value:
                out.append((flag, line))
        elif isinstance(value, list):
            out.append((flag, line))
            lines = value.lines if isinstance(value, LSeq) else []
            out.extend((str(v), lines[i] if i < len(lines) else line) for i, v in enumerate(value))
        elif value is not None:
            # str(value) exactly as srt-slurm (a mapping becomes its Python repr)
            text = str(dict(value)) if isinstance(value, dict) else str(value)
            out.extend([(flag, line), (text, line)])
    return out


def read_recipe(path: Path, doc: LMap, env: dict[str, str] | None) -> list[Deployment]:
    """An srt-slurm recipe -> one ``Deployment`` per variant. Raises ``InputError`` for a
    recipe without prefill or decode workers (naming the file and line)."""
    file = str(path)
    out = []
    for variant, cfg in variants(doc, file):
        out.append(_render(path, cfg, variant))
    return out


def _render(path: Path, cfg: Any, variant: str | None) -> Deployment:
    file = str(path)
    res = cfg.get("resources") if isinstance(cfg.get("resources"), LMap) else LMap()
    roles = sub_map(cfg, "roles", None)
    backend = sub_map(cfg, "backend", LMap())
    model = sub_map(cfg, "model", LMap())
    frontend = sub_map(cfg, "frontend")
    gpn = _int(res.get("gpus_per_node")) or 4
    res_line = getattr(res, "line", 0) or getattr(cfg, "line", 1)

    def role_info(mode: str) -> tuple[int, int | None, int | None, Any, Any, Any, int]:
        """(workers, nodes, explicit gpus, sglang config, env, container, line)"""
        if roles is not None and isinstance(roles.get(mode), dict):
            r = roles[mode]
            nodes_v = r.get("nodes")
            nodes_i = 0 if nodes_v == "colocate" else _int(nodes_v)
            return (
                _int(r.get("workers")) or 0,
                nodes_i,
                _int(r.get("gpus")),
                r.get("args") or LMap(),
                r.get("env") or {},
                r.get("container"),
                roles.line_of(mode),
            )
        sc = sub_map(backend, "sglang_config", LMap())
        section = sub_map(sc, mode, LMap())
        return (
            _int(res.get(f"{mode}_workers")) or 0,
            _int(res.get(f"{mode}_nodes")),
            _int(res.get(f"gpus_per_{mode}")),
            section,
            backend.get(f"{mode}_environment") or {},
            None,
            res.line_of(f"{mode}_workers") if f"{mode}_workers" in res else res_line,
        )

    p_workers, p_nodes, p_gpus, p_cfg, p_env, p_cont, p_line = role_info("prefill")
    d_workers, d_nodes, d_gpus, d_cfg, d_env, d_cont, d_line = role_info("decode")
    where = f" (variant {variant})" if variant else ""
    if p_workers <= 0 and d_workers <= 0:
        raise InputError(
            f"srt-slurm recipe{where} has no prefill or decode workers (resources.prefill_workers/decode_workers) at "
            f"line {res_line}: not a disaggregated recipe",
            source=file,
        )
    if d_workers <= 0:
        raise InputError(
            f"srt-slurm recipe{where} has prefill workers but no decode worker (resources.decode_workers) at line "
            f"{res_line}",
            source=file,
        )
    if p_workers <= 0:
        raise InputError(
            f"srt-slurm recipe{where} has decode workers but no prefill worker (resources.prefill_workers) at line "
            f"{res_line}",
            source=file,
        )

    def gpus_per(workers: int, nodes: int | None, explicit: int | None) -> int:
        if explicit is not None:
            return explicit
        if nodes and workers:
            return max(1, (nodes * gpn) // workers)
        return gpn

    gp = gpus_per(p_workers, p_nodes, p_gpus)
    gd = gpus_per(d_workers, d_nodes, d_gpus) if not (d_nodes == 0 and d_gpus is None) else gp
    _check_topology(p_workers, d_workers, p_nodes, d_nodes, gp, gd, gpn, file, res_line)
    total_nodes = (p_nodes or 0) + (d_nodes or 0)
    node_names = [f"node{i}" for i in range(total_nodes)]
    endpoints = _allocate([("prefill", p_workers, gp), ("decode", d_workers, gd)], gpn, node_names)

    mpath = str(model.get("path", "")) if model.get("path") is not None else ""
    is_hf = mpath.startswith("hf:")
    model_arg = mpath[3:] if is_hf else "/model"
    served = None
    for c in (p_cfg, d_cfg):
        if isinstance(c, dict):
            served = served or c.get("served-model-name") or c.get("served_model_name")
    if not served:
        served = Path(mpath[3:] if is_hf else mpath).name or "model"
    # the recipe's top-level ``environment`` joins every worker's, after the mode's own
    # (``worker_stage.py`` ``_start_worker``: ``get_environment_for_mode(mode)``, then
    # ``runtime.environment``, which is ``config.environment``; c88ef731)
    all_env = cfg.get("environment") if isinstance(cfg.get("environment"), dict) else {}
    use_sglang = str(frontend.get("type", "dynamo")) in ("sglang", "sidecar")
    launcher = "sglang.launch_server" if use_sglang else DYNAMO_MODULE
    gpu_raw = res.get("gpu_type") or backend.get("gpu_type")
    # a gpu_type kvcheck cannot place stays as written: the pipeline's unknown-gpu, never
    # no GPU at all (which would be decided on Hopper and Blackwell)
    gpu_type = (normalize_gpu_name(str(gpu_raw)) or str(gpu_raw)) if gpu_raw else None
    model_line = model.line_of("path") if isinstance(model, LMap) else res_line
    image = model.get("container")
    dep = Deployment(
        name=str(cfg.get("name", path.stem)), source=Location(file, getattr(cfg, "line", 1) or 1), variant=variant
    )

    http_next: dict[str, int] = {}
    boot_next: dict[str, int] = {}
    sys_port = SYS_PORT_BASE
    for mode, index, nodes in endpoints:
        mcfg = p_cfg if mode == "prefill" else d_cfg
        menv = p_env if mode == "prefill" else d_env
        cont = (p_cont if mode == "prefill" else d_cont) or image
        line0 = (p_line if mode == "prefill" else d_line) or res_line
        section_line = getattr(mcfg, "line", 0) or line0
        bport = None
        if mode == "prefill":
            bport = boot_next.get(nodes[0], BOOTSTRAP_PORT_BASE)
            boot_next[nodes[0]] = bport + 1
        node_argvs: list[list[Word]] = []
        for rank, node in enumerate(nodes):
            http = 0
            if rank == 0:
                http = http_next.get(node, HTTP_PORT_BASE)
                http_next[node] = http + HTTP_PORT_STRIDE
            nccl = NCCL_PORT_BASE + sys_port - SYS_PORT_BASE
            sys_port += 1
            toks: list[tuple[str, int | None]] = [
                ("--model-path", model_line),
                (model_arg, model_line),
                ("--served-model-name", section_line),
                (str(served), section_line),
                ("--host", None),
                ("0.0.0.0", None),
                ("--port", None),
                (str(http), None),
                ("--nccl-port", None),
                (str(nccl), None),
                ("--disaggregation-mode", line0),
                (mode, line0),
            ]
            if bport is not None:
                toks += [("--disaggregation-bootstrap-port", None), (str(bport), None)]
            if len(nodes) > 1:
                toks += [
                    ("--dist-init-addr", None),
                    (f"{nodes[0]}:{DIST_INIT_PORT}", None),
                    ("--nnodes", None),
                    (str(len(nodes)), None),
                    ("--node-rank", None),
                    (str(rank), None),
                ]
            if not use_sglang:
                toks += [("--request-plane", None), ("tcp", None)]
            cli_cfg = {
                k: v
                for k, v in mcfg.items()
                if k
                not in ("model-path", "model_path", "served-model-name", "served_model_name", "nccl-port", "nccl_port")
            }
            toks += _config_to_cli(
                cli_cfg, lambda k, m=mcfg, sl=section_line: m.line_of(k) if isinstance(m, LMap) else sl
            )
            node_argvs.append([Word(t, ln or section_line or res_line) for t, ln in toks])
        launch = Launch("server", launcher, node_argvs[0], line0)
        inst, _problem = instance_from_launch(
            launch,
            file=file,
            name=f"{dep.name}/{mode}_{index}",
            kind="srt-slurm",
            location=Location(file, line0),
            env={str(k): str(v) for k, v in {**(menv or {}), **all_env}.items()},
            image=str(cont) if cont is not None else None,
            replicas=1,
            nodes=len(nodes),
            gpus=min(gp if mode == "prefill" else gd, gpn),
            gpu_type=gpu_type,
            gpu_source=f"resources.gpu_type: {gpu_raw}" if gpu_type else "",
            hosts=list(nodes),
            host_network=True,
        )
        if inst is None:
            continue
        inst.model = mpath or None
        ident = sub_map(cfg, "identity")
        imodel = sub_map(ident, "model")
        if imodel.get("repo"):
            at = imodel.line_of("repo") if isinstance(imodel, LMap) else None
            inst.model_clues.append(
                (
                    str(imodel["repo"]),
                    f"srt-slurm identity.model.repo at {Location(file, at)}" if at else "srt-slurm identity.model.repo",
                )
            )
        if mpath:
            at = model.line_of("path") if isinstance(model, LMap) else None
            inst.model_clues.append(
                (mpath, f"srt-slurm model.path at {Location(file, at)}" if at else "srt-slurm model.path")
            )
        if len(nodes) > 1:
            others = []
            for ws in node_argvs:
                sub = Launch("server", launcher, ws, line0)
                i2, _ = instance_from_launch(sub, file=file, name=inst.name, kind="srt-slurm")
                others.append(i2.argv if i2 else [w.text for w in ws])
            inst.node_argvs = others
            inst.node_locations = [inst.location] * len(nodes)
        dep.instances.append(inst)
    from kvcheck.sources.release_clues import attach_recipe_clues

    attach_recipe_clues(dep.instances, cfg, file)  # identity.frameworks.sglang, dynamo.version (issue 14)
    return dep
