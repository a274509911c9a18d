"""An SGLang ``--config`` YAML file -> one server ``Instance`` (``-f`` and a pair side alike).

``python -m sglang.launch_server --config prefill.yaml`` starts a server from a mapping of
server-arg keys (``model-path: ...``, ``disaggregation-mode: prefill``). Given to ``-f``
or to ``--prefill/--decode``, such a file is that server: its role comes from its own
``disaggregation-mode`` key, as a launch line's comes from ``--disaggregation-mode``
(a pair side whose file says another role, or none, is read as that side, and the
``disaggregation-mode`` check names the difference).

The file is read as SGLang 0.5.23 reads it (``ConfigArgumentMerger`` in
``sglang/srt/utils/server_args_config_parser.py``): ``yaml.safe_load``, so a key written
twice keeps its later value (a ``duplicate-key`` warning names both lines); each key
becomes ``--key`` for the release's own argparse, release by release
(``FlagTable.parse_config``, ``Instance.parse_for``): what that parser refuses is the
server's start-up refusal (``startup-argparse``). A ``config`` key inside the file is
stored by argparse and never read (the merger reads only the command line's ``--config``).
kvcheck's own keys (``kvcheck-env``, ``kvcheck-gpu``, ``kvcheck-sglang-version``) are taken
out first (``kvcheck.sources.files``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem
from kvcheck.sources.deployments.yamlnodes import Duplicate, LMap

# who reads an SGLang --config file, and how (a key written twice: the later value)
MERGER = "SGLang's --config merger (ConfigArgumentMerger: yaml.safe_load)"
# kvcheck's own keys of a --config YAML (kvcheck.sources.files)
_OWN_KEYS = ("kvcheck-env", "kvcheck-gpu", "kvcheck-sglang-version")


def _flag_keys(doc: dict) -> int | None:
    """How many of ``doc``'s keys are an SGLang flag's own option string in the newest
    release (``model-path``, ``tp``, ``disaggregation-mode``; not an abbreviation), or None
    when ``doc`` is structured as no ``--config`` file is: a mapping value under a key
    that is not such a flag, or under ``model``/``model-path`` (Helm values'
    ``image: {repository: ...}``, ``model: {name: ...}``). A --config value is a scalar, a
    list, or JSON for a JSON flag."""
    from kvcheck.sources.deployments.launch_options import resolve_option
    from kvcheck.sources.quoting import has_arg_shape

    n = 0
    for k, v in doc.items():
        flag = resolve_option("--" + k) if has_arg_shape(k) and not k.startswith("-") else None
        exact = flag is not None and "--" + k in flag.option_strings
        nested = isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, dict) for x in v))
        if nested and (not exact or flag.dest == "model_path"):  # type: ignore[union-attr]
            return None
        n += exact
    return n


def is_server_config(doc: Any, *, side: bool = False) -> bool:
    """Whether a parsed YAML document is an SGLang ``--config`` file: a mapping whose keys
    are strings and, given to ``-f``, of which at least one is an SGLang flag
    (``_flag_keys``). ``side``: the file is a pair side (``--prefill/--decode FILE``),
    which the user names as a server: any mapping of string keys is read as one (a key
    SGLang refuses is its start-up refusal)."""
    if not isinstance(doc, dict) or not doc or not all(isinstance(k, str) for k in doc):
        return False
    if side:
        return True
    return bool(_flag_keys({k: v for k, v in doc.items() if k not in _OWN_KEYS}))


def duplicate_problems(dups: list[Duplicate], file: str, consumer: str) -> list[Problem]:
    """A ``duplicate-key`` warning per key written twice in a file whose consumer keeps the
    later value (``consumer``: who reads the file that way, e.g. "SGLang's --config merger
    (yaml.safe_load)"). The key is quoted only under ``kvcheck.sources.quoting``'s rule."""
    from kvcheck.sources.quoting import quoted

    out = []
    for d in dups:
        at = Location(file, d.again)
        out.append(
            Problem(
                "duplicate-key",
                f"{file}:{d.again}: key {quoted(d.key)} is written twice (lines {d.first} and {d.again}); {consumer} "
                f"keeps the later value (line {d.again}) and drops line {d.first}'s",
                at,
                f"Keep one {quoted(d.key)} key in {Path(file).name}: the later one is what runs.",
            )
        )
    return out


def read_server_config(
    path: Path, doc: dict, *, duplicates: list[Duplicate] | None = None, side: str | None = None
) -> Deployment:
    """One SGLang ``--config`` YAML (``doc``, parsed from ``path`` by
    ``kvcheck.sources.deployments.yamlnodes.load_documents``) -> a ``Deployment`` of its
    one server (see the module docstring). ``side``: the pair side it is given as
    (``prefill``/``decode``; its role when the file's own ``disaggregation-mode`` is not
    one). Raises ``NoServers`` (exit 2 alone; a helper among several ``-f`` files) for a
    file whose ``disaggregation-mode`` is neither prefill nor decode, ``InputError`` for
    a kvcheck key with a bad value."""
    from kvcheck.sglang.flags import FlagTable
    from kvcheck.sources.deployments.launch import SIDE_ROLE, Launch, instance_from_launch
    from kvcheck.sources.deployments.launch_options import _table, resolve_option
    from kvcheck.sources.deployments.shell import Word
    from kvcheck.sources.deployments.sourcing import NoServers
    from kvcheck.sources.files import ENV_KEY, GPU_ENV, VERSION_ENV, _env_mapping, _take_gpu_key, _take_version_key

    file = str(path)
    lines = doc.lines if isinstance(doc, LMap) else {}
    first = min(lines.values()) if lines else 1
    data = dict(doc)
    env = _env_mapping(data.pop(ENV_KEY, None), file)
    _take_gpu_key(data, env, file)
    version = _take_version_key(data, env, file)
    gpu = env.pop(GPU_ENV, None)
    env.pop(VERSION_ENV, None)
    # the args the newest release makes of each key (SGLang's merger, key by key), each
    # located at its key's line: the role, the port and the other options a reader needs
    # before the release is known; the exact parse is per release (parse_for below)
    table = _table()
    words: list[Word] = []
    for key, value in data.items():
        flag = resolve_option("--" + key) if isinstance(key, str) else None
        if flag is not None and flag.dest == "config":
            continue  # stored by argparse, never read (see the module docstring)
        try:
            argv = table.config_to_argv({key: value}, file)
        except InputError:
            continue  # refused by the release's merger: the per-release parse reports it
        line = lines.get(key, first)
        words.extend(Word(t, line, [], True, False, file) for t in argv)
    launch = Launch("server", "sglang.launch_server", words, first)
    token = SIDE_ROLE.set(side)
    try:
        inst, problem = instance_from_launch(launch, file=file, name=f"{path.name}", kind="config")
    finally:
        SIDE_ROLE.reset(token)
    dep = Deployment(name=path.name, source=Location(file, first))
    dep.problems.extend(duplicate_problems(duplicates or [], file, MERGER))
    if inst is None:
        if problem is not None:
            dep.problems.append(problem)
            return dep
        # a --config file runs no server itself: the launch line that names it does. With
        # no role of its own, which server it configures is not known (-f reads it
        # inside the launch line that names it with --config; otherwise exit 2)
        raise NoServers(
            "an SGLang --config file without disaggregation-mode: prefill|decode, and no launch line among the -f "
            "files names it with --config, so kvcheck cannot tell which server it configures; name it on that "
            "server's launch line (--config FILE) or give it disaggregation-mode",
            source=file,
        )
    inst.name = f"{inst.role}@{path.name}"
    inst.env = {**inst.env, **env}
    if gpu is not None:
        inst.gpu_type, inst.gpu_source = gpu, "kvcheck-gpu"
    if version:
        inst.release_clues.append(version_clue(version, path, lines.get("kvcheck-sglang-version", first)))
    config = data

    def parse_for(v: str) -> dict[str, Any]:
        return FlagTable.load(v).parse_config(config, file)

    inst.parse_for = parse_for  # type: ignore[attr-defined]
    dep.instances.append(inst)
    return dep


def version_clue(version: str, path: Path | str, line: int | None):
    """The release clue a ``kvcheck-sglang-version`` key (or variable) gives."""
    from kvcheck.sglang.releases import is_modeled, parse_release
    from kvcheck.sources.files import VERSION_KEY
    from kvcheck.sources.release_clues import STRENGTH_INPUT, ReleaseClue

    rel = parse_release(version) or version
    ok = is_modeled(rel)
    return ReleaseClue(
        (rel,) if ok else (),
        f"{VERSION_KEY} {version} in {path}",
        rel,
        f"{path}:{line or 1}",
        STRENGTH_INPUT,
        None if ok else f"SGLang {rel} ({VERSION_KEY} in {path}) is not a release kvcheck models",
    )


def one_instance_of(deployments: list[Deployment], role: str, spec: str) -> Instance:
    """The one server of ``role`` among the ``deployments`` read from a pair side's file
    ``spec``: the one whose ``--disaggregation-mode`` is ``role``; when the file holds a
    single server, that server whatever its mode (the ``disaggregation-mode`` check names
    a mode that is not ``role``). ``InputError`` (exit 2) saying how many it holds
    otherwise, and that ``-f`` reads a file of several servers."""
    from kvcheck.sources.deployments.launch_options import option_value

    servers = [i for d in deployments for i in d.instances]
    mine = [i for i in servers if option_value(i.argv, "disaggregation_mode") == role]
    if len(servers) == 1:
        mine = servers
    if len(mine) == 1:
        inst = mine[0]
        inst.role = role  # type: ignore[assignment]
        return inst
    variants = sum(1 for d in deployments if d.variant)
    held = f"{len(mine)} {role} servers" + (f" across {variants} variants" if variants else "")
    what = (
        f"holds {held}; a pair side is one {role} server"
        if mine
        else f"holds no {role} server ({len(servers)} servers, of other roles)"
    )
    raise InputError(f"{what}: give the file with -f to check every server in it", source=spec, field=f"--{role}")
