"""A pair (``--prefill SPEC --decode SPEC``) as a deployment of two instances.

The pair path runs the same stages as ``-f`` (``kvcheck.cluster.pipeline``): sources ->
instances -> release -> classes -> pair decisions -> checks -> report. This module is the
"sources -> instances" stage for pair inputs:

* a SGLang ``--config`` YAML file (dash keys, as ``sglang.launch_server --config``),
* a JSON object of args (flag or dest names),
* a file holding a launch command line (``--config FILE`` inside it is merged as SGLang does),
* a live server (``http(s)://HOST:PORT``) or a saved ``kvcheck snapshot``: read by
  ``kvcheck.sources.live`` into a ``Side`` (its ``/server_info`` version pins the release).

A file is not parsed here: the instance carries ``parse_for(release)``, which reads its
flags with that release's own parser, so that the release stage can draw the side's window
from the releases that accept them (as for a launch line of a ``-f`` file).
``pair_report(cluster_report)`` turns the one pair's result back into the pair JSON
contract (top-level ``verdict``/``plan``/``findings``, ``sides``; DESIGN.md Part 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Deployment, Instance, Location

if TYPE_CHECKING:
    from kvcheck.sides import Role


def side_instance(spec: str, role: Role, load_live: Any) -> Instance:
    """One side of a pair as an ``Instance`` (see the module docstring)."""
    from kvcheck.sources import is_live_spec

    if is_live_spec(spec):
        return _prebuilt(spec, role, load_live(spec, role))
    path = Path(spec)
    if not path.exists():
        from kvcheck.sources.limits import clip

        hint = " (a live server is http://HOST:PORT)" if "://" in spec or ":" in spec else ""
        raise InputError(f"file not found{hint}", source=clip(spec))
    if path.is_dir():
        raise InputError("is a directory, expected a file", source=spec)
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _yaml_instance(path, spec, role)
    if suffix == ".json":
        from kvcheck.sources import read_json_input

        data, text = read_json_input(path, spec)
        if isinstance(data, dict) and "server_info" in data:
            return _prebuilt(spec, role, load_live(spec, role))
        return _json_instance(path, spec, role, data, text)
    return _command_line_instance(path, spec, role)


def _prebuilt(spec: str, role: Role, side: Any) -> Instance:
    inst = Instance(
        role=role,
        name=role,
        location=Location(spec),
        argv=[],
        env=dict(side.env),
        gpu_type=side.gpu,
        gpu_source=side.gpu_source,
        kind="live",
    )
    inst.prebuilt_side = side  # type: ignore[attr-defined]
    return inst


def _keys_and_clues(data: dict, env: dict[str, str], path: Path, text: str, inst_kw: dict) -> list:
    """Take kvcheck's own keys out of ``data`` (``kvcheck-gpu``, ``kvcheck-sglang-version``)."""
    from kvcheck.sources.files import GPU_ENV, VERSION_ENV, _take_gpu_key, _take_version_key

    _take_gpu_key(data, env, str(path))
    version = _take_version_key(data, env, str(path))
    gpu = env.pop(GPU_ENV, None)
    env.pop(VERSION_ENV, None)
    if gpu is not None:
        inst_kw["gpu_type"], inst_kw["gpu_source"] = gpu, "kvcheck-gpu"
    return [_version_clue(version, path, text)] if version else []


def _version_clue(version: str, path: Path, text: str):
    """The clue a ``kvcheck-sglang-version`` key (or variable) gives."""
    from kvcheck.sglang.releases import is_modeled, parse_release
    from kvcheck.sources.files import VERSION_KEY
    from kvcheck.sources.release_clues import STRENGTH_INPUT, ReleaseClue

    rel = parse_release(version) or version
    where = f"{path}:{_line_of(text, VERSION_KEY) or 1}"
    ok = is_modeled(rel)
    return ReleaseClue(
        (rel,) if ok else (),
        f"{VERSION_KEY} {version} in {path}",
        rel,
        where,
        STRENGTH_INPUT,
        None if ok else f"SGLang {rel} ({VERSION_KEY} in {path}) is not a release kvcheck models",
    )


def _line_of(text: str, needle: str) -> int | None:
    for n, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return n
    return None


def _locations(text: str, path: Path, options: list[str]) -> dict[str, Location]:
    """Option as written -> the line it is on (first occurrence)."""
    out: dict[str, Location] = {}
    lines = text.splitlines()
    for opt in options:
        bare = opt.lstrip("-")
        pat = re.compile(rf"(^|[\s\"'])(--)?{re.escape(bare)}([\s=:\"']|$)")
        for n, line in enumerate(lines, start=1):
            if pat.search(line):
                out.setdefault(opt, Location(str(path), n))
                break
    return out


def _mapping_instance(
    path: Path, spec: str, role: Role, data: dict, text: str, kind: str, keys: Callable[[dict], list[str]]
) -> Instance:
    """The ``Instance`` of a mapping of flags (a ``--config`` YAML, JSON args) before its
    per-release parse: kvcheck's own keys taken out (``kvcheck-env``, ``kvcheck-gpu``,
    ``kvcheck-sglang-version``), each flag located at its line (``keys(data)``: the options
    the mapping's keys stand for)."""
    from kvcheck.sources.files import ENV_KEY, _env_mapping

    env = _env_mapping(data.pop(ENV_KEY, None), spec)
    kw: dict[str, Any] = {}
    clues = _keys_and_clues(data, env, path, text, kw)
    return Instance(
        role=role,
        name=role,
        location=Location(spec),
        argv=[],
        env=env,
        arg_locations=_locations(text, path, keys(data)),
        release_clues=clues,
        kind=kind,
        **kw,
    )


def _yaml_instance(path: Path, spec: str, role: Role) -> Instance:
    from kvcheck.sglang.flags import FlagTable
    from kvcheck.sources.files import _load_yaml, read_text

    text = read_text(path)
    data = _load_yaml(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"a SGLang --config file must hold a mapping of flags, got {type(data).__name__}", source=spec)
    inst = _mapping_instance(
        path, spec, role, data, text, "config", lambda d: [f"--{k}" for k in d if isinstance(k, str)]
    )
    inst.parse_for = lambda v: FlagTable.load(v).parse_config(data, spec)  # type: ignore[attr-defined]
    return inst


def _json_instance(path: Path, spec: str, role: Role, data: Any, text: str) -> Instance:
    from kvcheck.sources.files import args_from_mapping

    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object of server args, got {type(data).__name__}", source=spec)
    inst = _mapping_instance(
        path,
        spec,
        role,
        data,
        text,
        "json",
        lambda d: [k if str(k).startswith("--") else f"--{str(k).replace('_', '-')}" for k in d],
    )

    def parse_for(v: str) -> dict[str, Any]:
        # JSON args are kvcheck's own format (SGLang has none), but the flags and values
        # in it are the server's: what SGLang's parser refuses (a flag name, an invalid
        # value) is that server's start-up refusal (exit 1), as in a YAML --config or a
        # launch line. Only the shape of the object (a key that is no string, a flag
        # given twice under two spellings) is kvcheck's bad input (exit 2).
        from kvcheck.release.window import NotARefusal

        try:
            return args_from_mapping(data, spec, v)
        except InputError as exc:
            text = str(exc)
            if "flag names must be strings" in text or " is given twice " in text:
                raise NotARefusal(exc) from None
            raise

    inst.parse_for = parse_for  # type: ignore[attr-defined]
    return inst


def _command_line_instance(path: Path, spec: str, role: Role) -> Instance:
    """A launch-line file, read as ``kvcheck.sources.files.read_command_line`` reads it
    (a ``--config`` inside it through the same root-confined inner-file reader), with the
    per-release parse left to the release stage."""
    from kvcheck.errors import ArgparseRefusal
    from kvcheck.sglang.flags import FlagTable, config_path
    from kvcheck.sources.files import (
        ENV_KEY,
        GPU_ENV,
        VERSION_ENV,
        _env_mapping,
        _load_inner_yaml,
        _take_gpu_key,
        _take_version_key,
        check_inner_config,
        inner_path,
        mask_inner_values,
        read_text,
        split_command_line,
    )
    from kvcheck.sources.redact import collect_secrets, register_secrets, secrets_from_argv

    text = read_text(path)
    argv, env = split_command_line(text, spec)
    register_secrets(secrets_from_argv(argv) | collect_secrets(dict(env)))  # before any error can quote one
    cfg = config_path(argv, spec)
    config = None
    cfg_path = None
    kw: dict[str, Any] = {}
    clues = []
    if cfg:
        # --config FILE inside a command: SGLang puts the file's flags before the
        # command line's, so the command line wins (ConfigArgumentMerger).
        cfg_path = inner_path(cfg, path.parent)
        config = _load_inner_yaml(cfg_path, path.parent, source=spec)
        env = {**_env_mapping(config.pop(ENV_KEY, None), str(cfg_path)), **env}
        _take_gpu_key(config, env, str(cfg_path))
        _take_version_key(config, env, str(cfg_path))
    version = env.pop(VERSION_ENV, None)
    if version:
        clues.append(_version_clue(version, path, text))
    gpu = env.pop(GPU_ENV, None)
    if gpu is not None:
        kw["gpu_type"], kw["gpu_source"] = gpu, "kvcheck-gpu"
    options = [t.split("=", 1)[0] for t in argv if t.startswith("--")]
    inst = Instance(
        role=role,
        name=role,
        location=Location(spec, _line_of(text, argv[0]) if argv else None),
        argv=list(argv),
        node_argvs=[list(argv)],
        env=env,
        arg_locations=_locations(text, path, options),
        release_clues=clues,
        kind="command line",
        **kw,
    )

    def parse_for(v: str) -> dict[str, Any]:
        table = FlagTable.load(v)
        if config:
            check_inner_config(table, config, str(cfg_path))
        try:
            args = table.parse_argv(argv, spec, config=config)
        except ArgparseRefusal:
            raise
        except InputError as exc:
            raise mask_inner_values(exc, config) from None
        args.pop("config", None)
        return args

    inst.parse_for = parse_for  # type: ignore[attr-defined]
    return inst


def run_pair(prefill: str, decode: str, opts: Any, *, load_live: Any, read_pair: Any = None) -> tuple[Any, Any, Any]:
    """Check the pair ``prefill``/``decode`` through the pipeline: (pair ``Report``,
    prefill ``Side``, decode ``Side``; a side is None where its server refuses its flags).
    ``read_pair(read_prefill, read_decode)`` reads both sides (default: one after the other)."""
    from kvcheck.cluster.pipeline import check_deployments

    def reader(spec: str, role: Role):
        return lambda: side_instance(spec, role, load_live)

    read_pair = read_pair or (lambda rp, rd: (rp(), rd()))
    pi, di = read_pair(reader(prefill, "prefill"), reader(decode, "decode"))
    deployment = Deployment(name=f"{prefill} + {decode}", source=pi.location, instances=[pi, di])
    cluster = check_deployments([deployment], opts)
    p, d = pair_sides(cluster)
    return pair_report(cluster), p, d


def pair_report(cluster: Any) -> Any:
    """The pair JSON contract's ``Report`` from the ``ClusterReport`` of a pair deployment:
    the pair's findings and the deployment's (cluster checks, reader problems) in one list,
    sorted as the pair path always sorted them; the plan and side summaries of the pair's
    decision; ``extra.release_window`` (which releases were decided and how each side's
    release was found) and ``extra.gpu`` (each side's GPU and where it came from)."""
    from kvcheck.checks.base import Severity
    from kvcheck.report.model import Report, SideSummary

    dep = cluster.deployments[0]
    pr = dep.pairs[0] if dep.pairs else None
    located = list(dep.findings) + (list(pr.findings) if pr is not None else [])
    seen: set[tuple[str, str]] = set()
    findings = []
    for x in located:
        key = (x.finding.id, x.finding.message)
        if key not in seen:
            seen.add(key)
            findings.append(x.finding)
    order = {Severity.ERROR: 0, Severity.UNCHECKED: 1, Severity.WARNING: 2, Severity.INFO: 3}
    findings.sort(key=lambda f: (f.ignored, order[f.severity]))
    base = pr.report if pr is not None else None
    if base is not None:
        sides = base.sides
        extra = dict(base.extra)
    else:
        from kvcheck.preflight import _summary

        sides = []
        for c in sorted(dep.classes, key=lambda c: c.role != "prefill"):
            ir = c.first
            if c.side is not None:
                sides.append(_summary(c.side, None))
                continue
            refused = isinstance(c.key, tuple) and c.key[:1] == ("argparse-refused",)
            sides.append(
                SideSummary(
                    role=c.role,
                    origin=str(ir.instance.location),
                    model="unknown (flags refused)" if refused else (ir.model or "unknown"),
                    pool="not_read",
                    sglang_version=(c.key[3] if refused else ir.release),
                    version_source=ir.release_source,
                )
            )
        extra = {}
    if pr is not None and pr.releases is not None:
        extra["release_window"] = pr.releases
    gpus = {}
    for c in dep.classes:
        if c.side is not None:
            gpus[c.role] = {"gpu": c.side.gpu, "source": c.side.gpu_source}
    decided = (pr.releases or {}).get("gpus_decided") if pr is not None else None
    if decided:
        gpus = {role: {"gpu": "/".join(decided), "source": "no GPU given: decided on each"} for role in gpus}
    if gpus:
        extra["gpu"] = gpus
    from kvcheck.report.model import verdict_of

    return Report(
        verdict=verdict_of(findings),
        plan=base.plan if base is not None else None,
        findings=findings,
        sides=sides,
        kernel=cluster.kernel,
        runtime=base.runtime if base is not None else cluster.runtime,
        extra=extra,
    )


def pair_sides(cluster: Any) -> tuple[Any, Any]:
    """The (prefill, decode) ``Side`` of a pair deployment's decision (None where refused)."""
    dep = cluster.deployments[0]
    by = {c.role: c.side for c in dep.classes}
    return by.get("prefill"), by.get("decode")
