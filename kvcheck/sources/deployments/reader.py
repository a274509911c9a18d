"""``read_deployments``: the one entry point; detects each file's format by content.

Formats (decided from the content, never the extension):

* YAML whose documents are Kubernetes objects (``kind`` + ``apiVersion``, or a ``List``)
  -> ``kvcheck.sources.deployments.kubernetes``;
* a Docker Compose file (``services.<name>.command``) -> ``compose``;
* other YAML holding pod specs (Helm values: ``containers`` lists) -> ``kubernetes``;
* YAML that is an srt-slurm recipe (``backend.sglang_config`` / ``backend.type: sglang``,
  ``resources`` + ``model``, or ``base`` + ``override_*``)
  -> ``kvcheck.sources.deployments.srtslurm`` (one ``Deployment`` per variant);
* anything else (a shell script, a Markdown docs page with fenced blocks, a plain
  block of launch lines) -> ``kvcheck.sources.deployments.scripts``.

Text that looks like YAML (a ``key:`` mapping line, ``---``, ``apiVersion:``) but does not
parse is a YAML syntax error with its line, not a script.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.sources.deployments.bounds import check_launch_count, check_shape
from kvcheck.sources.deployments.duplicate_keys import (
    COMPOSE_STRICT,
    HELM_LOADER,
    KUBERNETES_STRICT,
    PYYAML_LOADER,
    SRT_SLURM_LOADER,
    refuse_duplicates,
    warn_duplicates,
)
from kvcheck.sources.deployments.instance import Deployment, Location
from kvcheck.sources.deployments.yamlnodes import Duplicate, check_size, load_documents

_YAMLISH = re.compile(r"^(---\s*$|apiVersion:|kind:|[A-Za-z_][A-Za-z0-9_.-]*:(\s|$))")
_LAUNCH_LINE = re.compile(
    r"-m\s+(sglang\.launch_server|dynamo\.sglang|sglang_router\.launch_router)|\bsglang\s+serve\b"
)
_LAUNCH_HINT = re.compile(r"(^|\s)(python[0-9.]*|sglang|docker|srun|bash|sh|export|nohup|exec|env)(\s|$)")


# a Markdown/MDX page's YAML front matter (``---`` / ``title: ...`` / ``---``, as every page of
# the SGLang and Dynamo docs sites starts), followed by Markdown: a heading, a fence, prose
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?:.*\r?\n){0,200}?---[ \t]*\r?\n")
_MARKDOWN_BODY = re.compile(r"(?m)^\s{0,3}(```|~~~|#{1,6} |[-*] \S|\d+\. \S|>)")
MARKDOWN_SUFFIXES = (".md", ".mdx", ".markdown")
# a Kubernetes object's top-level keys: a first document holding them is a manifest, not front matter
_MANIFEST_KEYS = re.compile(r"(?m)^(apiVersion|kind):")


def _front_matter_page(name: str, text: str) -> bool:
    """A page that opens with YAML front matter and goes on in Markdown (``.md``/``.mdx``, or a
    heading / fence / list after the front matter): read as Markdown, not as a YAML stream."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return False
    if _MANIFEST_KEYS.search(m.group(0)):  # ``helm template``'s ``---`` / ``# Source:`` / ``apiVersion:`` stream
        return False
    if name.lower().endswith(MARKDOWN_SUFFIXES):
        return True
    rest = text[m.end() :].lstrip("\r\n\t ")
    if rest.startswith("---") or _YAMLISH.match(rest):  # another document, or a key: a YAML stream
        return False
    return bool(_MARKDOWN_BODY.search(text, m.end()))


def _looks_like_yaml(text: str, name: str = "") -> bool:
    import io

    if _front_matter_page(name, text):
        return False

    for k, line in enumerate(io.StringIO(text)):  # lazily: a 50 MiB file of short lines is not split whole
        if k > 100_000:  # a hundred thousand comment lines before any content: not a manifest
            return False
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if _LAUNCH_HINT.search(s) and not _YAMLISH.match(s):
            return False
        return bool(_YAMLISH.match(line))
    return False


STDIN = "-"
# reader problems that hide a server's role (its --disaggregation-mode is in a config
# file inside the image, or behind an unset variable): the deployment is unchecked, not
# bad input, even when no server's role is known
ROLE_HIDDEN = ("config-not-read", "unresolved-variable", "servers-not-read")


def _read_stdin(path: Path) -> bytes:
    """``-f -``: what a pipe gives (``helm template ... |``, ``kubectl kustomize DIR |``,
    ``kubectl get -o yaml|json |``), read up to the same size cap as a file."""
    import sys

    from kvcheck.sources.deployments.yamlnodes import MAX_FILE_BYTES

    stream = getattr(sys.stdin, "buffer", None)
    if stream is not None and sys.stdin.isatty():
        raise InputError(
            "-f - reads a deployment from standard input: pipe one in (helm template ... | kvcheck preflight -f -)",
            source="-",
        )
    if stream is None:
        raise InputError("standard input is not readable", source="-")
    data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InputError(
            f"standard input holds more than kvcheck's limit of {MAX_FILE_BYTES // 1024 // 1024} MiB for a "
            "deployment; refusing to parse it",
            source="-",
        )
    return data


def read_text(path: Path) -> str:
    from kvcheck.sources.deployments.yamlnodes import MAX_FILE_BYTES
    from kvcheck.sources.files import read_bytes_bounded

    if str(path) == STDIN:
        data = _read_stdin(path)
    else:
        check_size(path)
        data = read_bytes_bounded(
            path, limit=MAX_FILE_BYTES, what="deployment file"
        )  # regular files only (O_NONBLOCK, fstat)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text (byte {exc.start}); a deployment file must be a YAML manifest, a recipe or a shell script",
            source=str(path),
        ) from None


def read_deployment_file(
    path: Path, *, env: dict[str, str] | None = None, use_os_environ: bool = False, side: str | None = None
) -> list[Deployment]:
    """One file -> its deployments (several for a recipe with sweeps/overrides).

    ``side``: the file is a pair side (``--prefill/--decode FILE``,
    ``kvcheck.cluster.pair_input``) of that role: a YAML mapping of other keys is that
    server's ``--config`` file, and a server without a PD role is kept as that role
    (``kvcheck.sources.deployments.launch.SIDE_ROLE``)."""
    from kvcheck.sources.deployments.launch import SIDE_ROLE

    token = SIDE_ROLE.set(side)
    try:
        return _read_deployment_file(path, env, use_os_environ, side)
    finally:
        SIDE_ROLE.reset(token)


def _read_deployment_file(
    path: Path, env: dict[str, str] | None, use_os_environ: bool, side: str | None
) -> list[Deployment]:
    from kvcheck.sources.deployments import compose, dynamosdk, kubernetes, scripts, sglang_config, srtslurm

    if str(path) != STDIN and path.is_dir():
        # a kustomization or a chart: rendered as it is deployed (kvcheck.sources.deployments.render)
        from kvcheck.sources.deployments.render import render_directory

        text, _label = render_directory(path)
    else:
        text = read_text(path)
        from kvcheck.sources.deployments import notebook

        if notebook.is_notebook(path.name, text):
            text = notebook.as_markdown(text)  # cells at their own file lines
    file = str(path)
    if not text.strip():
        raise InputError("file is empty", source=file)
    check_launch_count(text, file)
    yamlish = _looks_like_yaml(text, path.name)
    check_shape(text, file, yamlish)
    has_launch = bool(_LAUNCH_LINE.search(text))
    docs = None
    dups: list[Duplicate] = []
    if re.match(r"\s*(\{\s*\"|\{\s*\}|\[\s*[\{\]])", text):
        # JSON (``kubectl get -o json``, a .json manifest): YAML's flow syntax reads it
        # with its lines; JSON that YAML refuses (tabs, say) is read as JSON
        docs = _json_documents(text, file, dups)
    elif yamlish:
        try:
            docs = load_documents(text, file, dups)
        except InputError as exc:
            # a docs page whose first line happens to read "Note: ..." is not YAML; a
            # manifest or recipe with a syntax error is reported as one
            structured = bool(re.search(r"(?m)^\s*(apiVersion|kind|sglang_config|backend|resources)\s*:", text))
            if structured or not has_launch or "YAML syntax error" not in str(exc):
                raise
            docs = None
    if docs and len(docs) == 1 and isinstance(docs[0], list) and docs[0] and all(isinstance(d, dict) for d in docs[0]):
        docs = list(docs[0])  # a JSON array of objects
    if docs and all(isinstance(d, dict) for d in docs):
        if any(d.get("kind") or d.get("apiVersion") for d in docs):
            refuse_duplicates(dups, file, KUBERNETES_STRICT)
            return [kubernetes.read_manifest(path, docs, env, use_os_environ=use_os_environ)]
        if len(docs) == 1 and srtslurm.is_recipe(docs[0]):
            return warn_duplicates(srtslurm.read_recipe(path, docs[0], env), dups, file, SRT_SLURM_LOADER)
        if len(docs) == 1 and dynamosdk.is_graph_config(docs[0]):
            return warn_duplicates([dynamosdk.read_graph_config(path, docs[0])], dups, file, PYYAML_LOADER)
        if len(docs) == 1 and compose.is_compose(docs[0]):
            refuse_duplicates(dups, file, COMPOSE_STRICT)
            return [compose.read_compose(path, docs[0], env, use_os_environ=use_os_environ)]
        if len(docs) == 1 and sglang_config.is_server_config(docs[0]):
            return [sglang_config.read_server_config(path, docs[0], duplicates=dups, side=side)]
        if has_launch:
            # Helm values and other YAML holding pod specs ("containers" lists)
            try:
                return warn_duplicates(
                    [kubernetes.read_manifest(path, docs, env, use_os_environ=use_os_environ)], dups, file, HELM_LOADER
                )
            except InputError:
                pass
        if side is not None and len(docs) == 1 and sglang_config.is_server_config(docs[0], side=True):
            # a pair side (--prefill/--decode FILE) that is no other format: the server's
            # --config file, as the pair path has always read a YAML mapping
            return [sglang_config.read_server_config(path, docs[0], duplicates=dups, side=side)]
        if not has_launch:
            raise InputError(
                "a YAML mapping that is neither a Kubernetes manifest (no kind/apiVersion), an srt-slurm recipe "
                "(no backend.sglang_config) nor an SGLang --config file (a mapping of server-arg keys such as "
                "model-path and disaggregation-mode)",
                source=file,
            )
    from kvcheck.sources.deployments.variables import SCRIPT_PATH

    token = SCRIPT_PATH.set(file)  # $0 of the script: source "$(dirname "$0")/x.sh"
    try:
        deps = scripts.read_script(path, text, env, use_os_environ=use_os_environ)
    finally:
        SCRIPT_PATH.reset(token)
    for dep in deps:
        _add_markdown_manifests(path, text, dep, env, use_os_environ)
    if not any(dep.instances or dep.routers or any(p.id in ROLE_HIDDEN for p in dep.problems) for dep in deps):
        problems = [p for dep in deps for p in dep.problems]
        _no_servers(text, file, problems)
        deps[0].problems[:] = problems
    return deps


def servers_not_read(file: str, problems: list):
    """A ``servers-not-read`` problem when a file with no launch line sources a file
    kvcheck could not read: the servers may be started by functions defined there
    (a CI script calling ``launch_sglang_server`` from ``common.sh``): unchecked, never
    "no launch line"."""
    from kvcheck.sources.deployments.instance import Problem

    unread = [p for p in problems if p.id == "source-not-read"]
    if not unread:
        return None
    where = unread[0].location
    return Problem(
        "servers-not-read",
        f"{file}: no SGLang launch line in this file, and it sources a file kvcheck could not read ({where}): "
        "the servers it may start from there are not checked",
        where,
        "Give the sourced file with -f too (or pass --root DIR holding it), so its launch lines are read.",
    )


_SERVER_LINE = re.compile(r"(?m)^(?![ \t]*#).*?(-m\s+(sglang\.launch_server|dynamo\.sglang)\b|\bsglang\s+serve\b)")


_PD_MODE = re.compile(r"--disaggregation-mode[=\s]+[\"']?(prefill|decode|\$)")


def _logical_line(text: str, start: int) -> str:
    """The line of ``text`` at ``start`` with its backslash-continued lines (at most 200)."""
    lines = text[start:].split("\n", 200)
    out = []
    for line in lines:
        out.append(line)
        if not line.rstrip().endswith("\\"):
            break
    return "\n".join(out)


def _no_servers(text: str, file: str, problems: list) -> None:
    """Raise ``NoServers``: the file starts no PD server. A server launch line without
    ``--disaggregation-mode prefill|decode`` is named as what it is (an SGLang server
    that takes no part in KV transfer), never "no launch line"."""
    from kvcheck.sources.deployments.instance import Location
    from kvcheck.sources.deployments.sourcing import NoServers

    refusal = next((p for p in problems if p.id == "startup-argparse"), None)
    if refusal is not None:
        return  # a server that refuses its flags at start-up: a failed deployment, not bad input
    hidden = servers_not_read(file, problems)
    if hidden is not None:
        problems.append(hidden)
        return
    m = _SERVER_LINE.search(text)
    if m:
        loc = Location(file, text.count("\n", 0, m.start(1)) + 1)
        if _PD_MODE.search(_logical_line(text, m.start(1))):
            # the line names its role, but no reading reached it: never call it a non-PD server
            raise NoServers(
                f"line {loc.line}: an SGLang launch line with --disaggregation-mode that kvcheck could not follow "
                "(in a shell function never called, a here-document it does not read as a script, or a command "
                "it does not model); no prefill or decode server was read from this file: pass the launch lines "
                "as a script of their own",
                source=file,
                non_pd=[],
            )
        raise NoServers(
            f"line {loc.line}: an SGLang server without --disaggregation-mode prefill|decode (--disaggregation-mode "
            "null: it takes no part "
            "in KV transfer); kvcheck checks prefill/decode deployments and found no prefill or decode server in "
            "this file",
            source=file,
            non_pd=[loc],
        )
    raise NoServers(
        "no SGLang launch line found (python -m sglang.launch_server, sglang serve, python -m dynamo.sglang, "
        "sglang_router.launch_router)",
        source=file,
    )


def _add_markdown_manifests(
    path: Path, text: str, dep: Deployment, env: dict[str, str] | None, use_os_environ: bool
) -> None:
    """A docs page's ```` ```yaml ```` blocks that are Kubernetes manifests: their SGLang
    workloads join the page's deployment (lines kept: each block is read at its place)."""
    from kvcheck.sources.deployments import kubernetes
    from kvcheck.sources.deployments.router import link_router
    from kvcheck.sources.deployments.shell import markdown_yaml_blocks

    found = False
    for first_line, block in markdown_yaml_blocks(text):
        try:
            docs = load_documents("\n" * (first_line - 1) + block, str(path))
        except InputError:
            continue  # a sketch in the prose, not a manifest
        if not docs or not all(isinstance(d, dict) and (d.get("kind") or d.get("apiVersion")) for d in docs):
            continue
        try:
            part = kubernetes.read_manifest(path, docs, env, use_os_environ=use_os_environ)
        except InputError:
            continue
        dep.instances.extend(part.instances)
        dep.routers.extend(part.routers)
        dep.problems.extend(part.problems)
        found = True
    if found:
        for r in dep.routers:
            link_router(r, dep.instances)


def _json_documents(text: str, file: str, dups: list[Duplicate] | None = None) -> list:
    import json

    try:
        return load_documents(text, file, dups)
    except InputError as yaml_exc:
        try:
            data = json.loads(text)
        except ValueError as exc:
            if "YAML syntax error" in str(yaml_exc):
                raise InputError(f"not valid JSON: {exc}", source=file) from None
            raise
    from kvcheck.sources.deployments.yamlnodes import LMap, LSeq

    def wrap(v):
        if isinstance(v, dict):
            return LMap({k: wrap(x) for k, x in v.items()})
        if isinstance(v, list):
            return LSeq([wrap(x) for x in v])
        return v

    docs = data if isinstance(data, list) and all(isinstance(d, dict) for d in data) else [data]
    return [wrap(d) for d in docs]


def read_deployments(
    paths: list[Path],
    *,
    env: dict[str, str] | None = None,
    config_files: dict[str, str] | None = None,
    helm_values: list[str] | None = None,
    inherit_env: bool = False,
) -> list[Deployment]:
    """Read published deployment files unchanged -> ``Deployment`` objects.

    ``paths``: files, each a Kubernetes manifest (single/multi-document, ``List``), an
    srt-slurm recipe, or a shell script / Markdown docs block; ``env``: variables from
    ``--env FILE`` (looked up after the file's own assignments and the container's env);
    ``inherit_env`` (``--inherit-env``): a ``$VAR`` set nowhere else is filled from
    kvcheck's own environment, as the shell that runs the script would; off by default,
    so that a verdict never rests on the machine kvcheck runs on (an unset variable
    stays unresolved and its flag is reported); ``config_files``: ``--config-file IMAGE_PATH=
    LOCAL_PATH`` (a launch line's ``--config IMAGE_PATH`` is read from LOCAL_PATH);
    ``helm_values``: ``--values FILE`` for a chart directory (``helm template -f FILE``). Returns one ``Deployment``
    per file, or one per
    variant for an srt-slurm recipe with ``sweep``/``override_*`` sections, in the order
    given.

    Raises ``InputError`` (exit 2), one line naming the file (and line where there is
    one): unreadable or over-size file (50 MiB), YAML syntax error, alias bomb / too deep
    nesting, a manifest with no SGLang container, a recipe without prefill or decode
    workers, a variable that refers to itself.
    """
    from kvcheck.sources.deployments.launch_options import CONFIG_FILES

    out: list[Deployment] = []
    from kvcheck.sources.deployments.render import HELM_VALUES
    from kvcheck.sources.deployments.sourcing import GIVEN_FILES, READ_INSIDE, NoServers, non_pd_problem
    from kvcheck.sources.deployments.variables import PRELUDE
    from kvcheck.sources.limits import check_cap

    if helm_values and not any(str(p) != STDIN and Path(p).is_dir() for p in paths):
        raise InputError(
            "--values FILE is for a Helm chart directory given to -f (helm template -f FILE); no -f names a directory",
            field="--values",
        )

    paths = [Path(p) for p in paths]
    several = len(paths) > 1
    token = CONFIG_FILES.set(dict(config_files or {}))
    values_token = HELM_VALUES.set(tuple(str(v) for v in helm_values or ()))
    given = GIVEN_FILES.set(frozenset(os.path.realpath(str(p)) for p in paths if str(p) != STDIN))
    prelude_token = None
    first_empty: NoServers | None = None
    inside: set[str] = set()
    inside_token = READ_INSIDE.set(inside)
    per_file: list[tuple[Path, list[Deployment], NoServers | None]] = []
    try:
        helpers, prelude, defined = _helpers(paths, env, inherit_env) if several else ({}, {}, {})
        prelude_token = PRELUDE.set(prelude)
        for p in paths:
            if p in helpers:
                # a file of variables among several (-f 00_common.sh): what it sets feeds
                # the other scripts (checked below: something must use it)
                dep = Deployment(name=p.name, source=Location(str(p), 1), problems=helpers[p])
                out.append(dep)
                per_file.append((p, [dep], None))
                continue
            try:
                deps = read_deployment_file(p, env=env, use_os_environ=inherit_env)
                empty = None
            except NoServers as exc:
                if not several:
                    raise
                # a helper file (router-only scripts are read as routers; this one has
                # neither): it contributes the non-PD servers it starts, if any
                first_empty = first_empty or exc
                deps = [
                    Deployment(
                        name=p.name, source=Location(str(p), 1), problems=[non_pd_problem(loc) for loc in exc.non_pd]
                    )
                ]
                empty = None if exc.non_pd else exc
            out.extend(deps)
            per_file.append((p, deps, empty))
            check_cap("variants", len(out), field="deployments (files and recipe variants)", source=str(p))
    finally:
        CONFIG_FILES.reset(token)
        HELM_VALUES.reset(values_token)
        GIVEN_FILES.reset(given)
        READ_INSIDE.reset(inside_token)
        if prelude_token is not None:
            PRELUDE.reset(prelude_token)
    if several and any(_has_servers(d) for d in out):
        out = _each_file_counts(per_file, helpers, defined, inside, out)
    if several and not any(_has_servers(d) for d in out):
        raise first_empty or InputError(
            "none of the -f files launches an SGLang server or PD router", source=str(paths[0])
        )
    _link_across_files(out)
    settle(out)
    return out


def settle(deployments: list[Deployment]) -> None:
    """What every reading ends with (``-f`` files and a pair's two sides alike): each
    instance's model named from the file's clues (``name_model``), and an
    ``unresolved-address`` info per address filled in at run time."""
    for dep in deployments:
        _note_symbolic(dep)
        for inst in dep.instances:
            name_model(inst)


def _has_servers(dep: Deployment) -> bool:
    return bool(dep.instances or dep.routers or any(p.id in (*ROLE_HIDDEN, "startup-argparse") for p in dep.problems))


def _helpers(
    paths: list[Path], env: dict[str, str] | None, inherit_env: bool = False
) -> tuple[dict[Path, list], dict, dict[Path, dict]]:
    """Of several ``-f`` files, the shell files with no SGLang launch line (a sourced
    ``00_common.sh``): each one's problems, the variables they set, read in the order
    given (``kvcheck.sources.deployments.sourcing.helper_variables``), and each one's own
    (name -> ``VarDef``) for ``_each_file_counts``."""
    from kvcheck.sources.deployments.sourcing import helper_variables

    helpers: dict[Path, list] = {}
    prelude: dict = {}
    defined: dict[Path, dict] = {}
    for p in paths:
        if str(p) == STDIN or p.is_dir():
            continue
        try:
            text = read_text(p)
        except InputError:
            continue  # reported when the file itself is read
        if _LAUNCH_LINE.search(text) or _looks_like_yaml(text) or re.match(r"\s*[\[{]", text):
            continue
        before = dict(prelude)
        prelude, problems = helper_variables(p, text, env, prelude, use_os_environ=inherit_env)
        helpers[p] = problems
        defined[p] = {n: d for n, d in prelude.items() if before.get(n) != d}
    return helpers, prelude, defined


def _uses(text: str, name: str) -> bool:
    """Whether ``text`` refers to the variable ``name`` (``$NAME``, ``${NAME...}``, ``$(NAME)``)."""
    return re.search(r"\$(\{|\()?" + re.escape(name) + r"(?![A-Za-z0-9_])", text) is not None


def _each_file_counts(
    per_file: list[tuple[Path, list[Deployment], Any]],
    helpers: dict[Path, list],
    defined: dict[Path, dict],
    inside: set[str],
    out: list[Deployment],
) -> list[Deployment]:
    """Of several ``-f`` files, each must contribute something kvcheck names: servers or a
    router (read), a reader problem about a server, the variables a file of assignments
    sets that another file uses (or exports to the servers read after it), or the file
    another one sources or names with ``--config`` (then read there, and not a second time
    as a server of its own). A file that contributes nothing is kvcheck's bad input
    (exit 2 naming it and what kvcheck expected), never silently nothing."""
    texts: dict[Path, str] = {}
    for p, _, _ in per_file:
        if str(p) != STDIN and p.is_file():
            try:
                texts[p] = read_text(p)
            except InputError:
                texts[p] = ""
    drop: set[int] = set()
    for p, deps, empty in per_file:
        real = os.path.realpath(str(p)) if str(p) != STDIN else None
        if real in inside:
            # read inside another -f file: a sourced script, a launch line's --config.
            # An SGLang --config file is that line's server, not one more server.
            for d in deps:
                if all(i.kind == "config" for i in d.instances) and (d.instances or not (d.routers or d.problems)):
                    drop.add(id(d))
            continue
        if p in helpers:
            names = defined.get(p, {})
            others = [t for q, t in texts.items() if q != p]
            if any(d.exported for d in names.values()) or any(_uses(t, n) for n in names for t in others):
                continue
            what = (
                f"it sets {', '.join(sorted(names)[:5])}{' ...' if len(names) > 5 else ''}, which no other -f file uses"
                if names
                else "it sets no variable"
            )
            raise InputError(
                "given with -f, but kvcheck found nothing in it to check: no SGLang launch line (python -m "
                "sglang.launch_server, sglang serve, python -m dynamo.sglang) or PD router, no Kubernetes manifest, "
                f"srt-slurm recipe or SGLang --config mapping, and {what}; no other -f file sources it or names it "
                "with --config",
                source=str(p),
            )
        if empty is not None:
            raise InputError(
                f"{str(empty).split(': ', 1)[-1]}; given with -f, it contributes nothing: no other -f file sources "
                "it, names it with --config or uses a variable it sets",
                source=str(p),
            )
    return [d for d in out if id(d) not in drop]


_MODEL_ENV_DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]+)\}")


def name_model(inst) -> None:
    """``Instance.model`` / ``model_clue`` from what the file says besides ``--model-path``
    (``kvcheck.sources.models.clues``): set only when ``--model-path`` is not itself a
    model kvcheck has and a clue is."""
    from kvcheck.sources.deployments.launch_options import option_value
    from kvcheck.sources.models import clues

    written = option_value(inst.argv, "model_path")
    if clues.known(written):
        return
    found: list[tuple[str, str]] = list(inst.model_clues)
    served = option_value(inst.argv, "served_model_name")
    if served:
        loc = inst.arg_locations.get("--served-model-name")
        found.append((served, f"--served-model-name at {loc}" if loc else "--served-model-name"))
    for var in clues.MODEL_ENV_NAMES:
        v = inst.env.get(var)
        if v:
            m = _MODEL_ENV_DEFAULT.fullmatch(v.strip())
            found.append((m.group(1) if m else v, f"the container's {var}"))
    if written:
        m = _MODEL_ENV_DEFAULT.fullmatch(written.strip())
        if m:
            found.append((m.group(1), f"the default of --model-path {written}"))
    if inst.model:
        found.append((inst.model, "the model the file names"))
        hub_alias = clues.alias_clue(inst.model)
        if hub_alias:
            found.append(
                (hub_alias, f"srt-slurm model.path alias {inst.model} (kvcheck.sources.models.clues.SRT_SLURM_ALIASES)")
            )
    dropped: list[tuple[str, str]] = []
    if inst.model:
        # a served name or environment value naming the family of a re-upload whose own name
        # (the srt-slurm alias ``dsr1-fp4``) says another precision: not this checkpoint
        kept = []
        for n, c in found:
            hub = clues.known(n)
            word = (
                clues.precision_conflict(inst.model, hub)
                if hub and c.startswith(("--served-model-name", "the container's"))
                else None
            )
            if word:
                dropped.append((n, f"{c}; not used: the file's model {inst.model} says {word}, which {hub} is not"))
            else:
                kept.append((n, c))
        found = kept
    hit = clues.pick(found)
    if hit is not None:
        inst.model, inst.model_clue = hit
    else:
        named = [
            (n, c)
            for n, c in ([(written, "--model-path")] if written else []) + dropped + found
            if n and clues.looks_like_hub_id(n)
        ]
        if named:
            inst.model_named = named[0]


def _note_symbolic(dep: Deployment) -> None:
    """An ``unresolved-address`` info problem for each address / port / rank value filled
    in at run time (``Instance.symbolic``): named, located, never a reason for unchecked."""
    from kvcheck.sources.deployments.instance import Problem

    seen: set[tuple] = set()
    for inst in dep.instances:
        for u in inst.symbolic:
            key = (u.variable, u.flag, str(u.location))
            if key in seen:
                continue
            seen.add(key)
            dep.problems.append(
                Problem(
                    "unresolved-address",
                    f"{u.location}: `{u.flag} {u.shown}` in {inst.name} is filled in at run time; an address, port "
                    "or rank shapes no KV transfer, so it is checked only for agreement across the "
                    "instance's nodes",
                    u.location,
                    "Nothing to do; pass --env FILE with its value to have port clashes checked too.",
                )
            )


def _link_across_files(deps: list[Deployment]) -> None:
    """A router in one file whose URLs name servers of other files read with it
    (``-f prefill.yaml -f decode.yaml -f router.yaml``): link what the file alone could
    not, against every non-variant deployment's instances."""
    from kvcheck.sources.deployments.router import link_router

    plain = [d for d in deps if d.variant is None]
    if len(plain) < 2:
        return
    everyone = [i for d in plain for i in d.instances]
    for d in plain:
        for r in d.routers:
            before = ([p.instance for p in r.prefills], list(r.decode_instances))
            link_router(r, everyone)
            for p, old in zip(r.prefills, before[0], strict=False):
                p.instance = old or p.instance
            r.decode_instances = [old or new for old, new in zip(before[1], r.decode_instances, strict=False)]
