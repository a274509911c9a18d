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


def side_instance(spec: str, role: Role, load_live: Any, variables: Any = None) -> Instance:
    """One side of a pair as an ``Instance`` (see the module docstring). ``variables``:
    ``(--env values or None, --inherit-env)`` for the ``$VAR`` references of a script,
    read as the ``-f`` reader reads them (it is that reader)."""
    from kvcheck.sources import is_live_spec

    if is_live_spec(spec):
        return _prebuilt(spec, role, load_live(spec, role))
    path = Path(spec)
    if not path.exists():
        from kvcheck.sources.limits import clip, spec_hint

        raise InputError(f"file not found{spec_hint(spec)}", source=clip(spec))
    if path.is_dir():
        raise InputError("is a directory, expected a file", source=spec)
    if path.suffix.lower() == ".json":
        from kvcheck.sources import read_json_input

        data, text = read_json_input(path, spec)
        if isinstance(data, dict) and "server_info" in data:
            return _prebuilt(spec, role, load_live(spec, role))
        if not (isinstance(data, dict) and (data.get("kind") or data.get("apiVersion"))):
            return _json_instance(path, spec, role, data, text)
    return _file_instance(path, spec, role, variables)


def _file_instance(path: Path, spec: str, role: Role, variables: Any = None) -> Instance:
    """The ``role`` server of a pair side's file, read by the ``-f`` readers
    (``kvcheck.sources.deployments.reader.read_deployment_file``): an SGLang ``--config``
    YAML (any mapping of server-arg keys), a Kubernetes manifest, an srt-slurm recipe, a
    script or docs page of launch lines (its own assignments, exports, ``${VAR:-default}``
    and ``--config`` read as ``-f`` reads them), or a file of bare server args
    (``--model-path X --tp 2``, read as ``python -m sglang.launch_server`` followed by
    them). The file must hold one server of that role (``sglang_config.one_instance_of``:
    else exit 2 saying how many, and to use ``-f``). The reader's problems about that
    server and the file (not about its other servers) go with it
    (``Instance.side_problems``, joined to the pair's deployment by ``run_pair``)."""
    from kvcheck.sources.deployments.reader import read_deployment_file
    from kvcheck.sources.deployments.sglang_config import one_instance_of
    from kvcheck.sources.deployments.sourcing import NoServers
    from kvcheck.sources.limits import MAX_FILE_BYTES

    size = path.stat().st_size
    if size > MAX_FILE_BYTES:  # a pair side's file: the server-arg cap (SECURITY.md), before one byte is read
        raise InputError(
            f"file is {size} bytes; kvcheck reads a pair side's file up to {MAX_FILE_BYTES} bytes (is this the right "
            "file?)",
            source=spec,
        )
    values, inherit = variables if variables is not None else (None, False)
    try:
        deps = read_deployment_file(path, env=dict(values) if values else None, use_os_environ=bool(inherit), side=role)
    except NoServers:
        bare = _bare_args(path, values, bool(inherit), role)
        if bare is None:
            raise
        deps = bare
    inst = one_instance_of(deps, role, spec)
    inst.name = role
    others = {i.location for d in deps for i in d.instances if i is not inst}
    inst.side_problems = [  # type: ignore[attr-defined]
        p for d in deps for p in d.problems if p.id != "not-disaggregated" and p.location not in others
    ]
    return inst


def _bare_args(path: Path, values: Any, inherit: bool, role: Role) -> list[Deployment] | None:
    """A pair side's file whose first command is server args without a launcher
    (``--model-path X --tp 2 ...``, on one line or several): read as the line
    ``python -m sglang.launch_server`` followed by all of them, each at its own line.
    None when it is not such a file."""
    from kvcheck.sources.deployments import scripts
    from kvcheck.sources.deployments.launch import SIDE_ROLE
    from kvcheck.sources.deployments.reader import read_text

    text = read_text(path)
    lines = text.splitlines(keepends=True)
    k = next((n for n, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), None)
    if k is None or not re.match(r"\s*--?[A-Za-z]", lines[k]):
        return None
    lines[k] = "python -m sglang.launch_server " + lines[k]
    # every line of the file is args of that one command, as the pair path has always read
    # it (one argv, lines joined): each line ends in a continuation, a comment or blank
    # line between them is one (``\`` alone), so each word stays at its own line
    last = max(n for n, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#"))
    for n in range(k, last):
        body = lines[n].rstrip("\r\n")
        if "'" not in body and '"' not in body:
            body = re.sub(r"\s+#.*$", "", body)  # a trailing comment would swallow the continuation
        if not body.strip() or body.lstrip().startswith("#"):
            lines[n] = "\\\n"
        elif not body.endswith("\\"):
            lines[n] = body + " \\\n"
    token = SIDE_ROLE.set(role)
    try:
        return scripts.read_script(path, "".join(lines), values, use_os_environ=inherit)
    finally:
        SIDE_ROLE.reset(token)


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


def run_pair(
    prefill: str, decode: str, opts: Any, *, load_live: Any, read_pair: Any = None, variables: Any = None
) -> tuple[Any, Any, Any]:
    """Check the pair ``prefill``/``decode`` through the pipeline: (pair ``Report``,
    prefill ``Side``, decode ``Side``; a side is None where its server refuses its flags).
    ``read_pair(read_prefill, read_decode)`` reads both sides (default: one after the other).
    ``variables``: ``(--env values, --inherit-env)`` for launch-line files' ``$VAR``s."""
    from kvcheck.cluster.pipeline import check_deployments

    def reader(spec: str, role: Role):
        return lambda: side_instance(spec, role, load_live, variables)

    read_pair = read_pair or (lambda rp, rd: (rp(), rd()))
    pi, di = read_pair(reader(prefill, "prefill"), reader(decode, "decode"))
    problems = [p for inst in (pi, di) for p in getattr(inst, "side_problems", [])]
    deployment = Deployment(name=f"{prefill} + {decode}", source=pi.location, instances=[pi, di], problems=problems)
    from kvcheck.sources.deployments.reader import settle

    settle([deployment])
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
    if decided:  # the sides whose GPU was not given: decided on each GPU of the window
        each = {"gpu": "/".join(decided), "source": "no GPU given: decided on each"}
        gpus = {role: each if str(g["source"]).startswith("default") else g for role, g in gpus.items()}
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
