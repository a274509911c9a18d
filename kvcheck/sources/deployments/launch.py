"""Launch lines -> ``Instance`` / ``Router``: what every reader shares.

A launch line is a list of ``Word`` (text after variable expansion, its source line,
unresolved names). ``find_launches`` looks through one command for the program that
starts SGLang, seeing through the wrappers deployments use: ``exec``, ``nohup``,
``env VAR=v``, ``VAR=v`` prefixes, ``srun [opts]``, ``numactl``, ``docker|podman run
[opts] IMAGE``, and ``bash|sh -c "SCRIPT"`` (the script is read as shell, recursively).
Programs recognised:

* ``python[3[.x]] [-u ...] -m sglang.launch_server`` and ``sglang serve`` (SGLang's
  ``sglang/cli/serve.py``; 0.5.x): an SGLang server;
* ``python -m dynamo.sglang``: Dynamo's SGLang worker. Dynamo parses its own flags
  first (``parse_known_args`` in ``components/src/dynamo/sglang/args.py``) and hands
  the rest to SGLang's ``ServerArgs``; the flags of Dynamo's runtime and SGLang groups
  (``DYNAMO_FLAGS``, from ``runtime_args.py`` / ``backend_args.py``; split by
  ``launch_options.split_dynamo``) go to
  ``Instance.launcher_args``, anything else stays in ``argv`` for SGLang's own checks.
  Note: when ``--disaggregation-bootstrap-port`` is not given, Dynamo's worker reserves
  a free port itself (``_reserve_disaggregation_bootstrap_port`` in ``args.py``), so
  SGLang's default 8998 does not apply to a ``dynamo.sglang`` prefill;
* ``python -m sglang_router.launch_router`` (and the older
  ``sglang.srt.disaggregation.mini_lb`` / ``launch_lb``): the PD router.

The role comes from ``--disaggregation-mode`` only (matched with argparse's prefix
rules through kvcheck's flag table), never from a name.

Beside this module: ``launch_options`` (what an option token means: ``resolve_option``,
``option_value``, ``--config`` merging, Dynamo's flags), ``addresses`` (address, port and
node-rank options; multi-node instances), ``router`` (router launches and linking).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from kvcheck.sources.deployments.addresses import (
    ADDRESS_DESTS,
    merge_multinode,
    rank_is_symbolic,
    set_node_rank,
    settle_addresses,
)
from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem, Unresolved
from kvcheck.sources.deployments.launch_options import (
    CONFIG_FILES,
    DYNAMO_FLAGS,
    MAX_CONFIG_BYTES,
    _dest,
    _is_option,
    _mode_word,
    _takes_value,
    merge_config_file,
    misspelled_mode,
    mode_refusal,
    option_value,
    resolve_option,
    split_dynamo,
)
from kvcheck.sources.deployments.router import link_router, router_from_launch
from kvcheck.sources.deployments.shell import Word, words_of
from kvcheck.sources.deployments.variables import Scope, VarDef

# Names that moved to the modules beside this one, re-exported for the old import path.
__all__ = [
    "ADDRESS_DESTS",
    "CONFIG_FILES",
    "DYNAMO_FLAGS",
    "DYNAMO_MODULE",
    "MAX_CONFIG_BYTES",
    "ROUTER_MODULES",
    "SERVER_MODULES",
    "SGLANG_DEFAULT_PORT",
    "Launch",
    "find_launches",
    "handle_assignments",
    "instance_from_launch",
    "link_router",
    "merge_config_file",
    "merge_multinode",
    "misspelled_mode",
    "mode_refusal",
    "option_value",
    "rank_is_symbolic",
    "resolve_option",
    "router_from_launch",
    "set_node_rank",
    "settle_addresses",
    "split_dynamo",
    "take_launch",
]

SERVER_MODULES = ("sglang.launch_server",)
ROUTER_MODULES = (
    "sglang_router.launch_router",
    "sglang.srt.disaggregation.mini_lb",
    "sglang.srt.disaggregation.launch_lb",
)
DYNAMO_MODULE = "dynamo.sglang"
SGLANG_DEFAULT_PORT = 30000  # ServerArgs.port default (sglang/srt/server_args.py, 0.5.x)

_PYTHON = re.compile(r"python[0-9.]*")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELLS = {"bash", "sh", "zsh", "dash"}
_CONTAINER_RT = {"docker", "podman", "nerdctl", "enroot"}


@dataclass
class Launch:
    """One program start found in a command: ``kind`` (``server`` or ``router``), the
    ``launcher`` name, its ``args`` as words, and what the wrappers said: ``env``
    (``VAR=v``, ``env VAR=v``, ``docker -e``), ``image`` (``docker run IMAGE``),
    ``hosts`` (``srun -w``, ``ssh host``), ``host_network`` and the launcher ``line``."""

    kind: str
    launcher: str
    args: list[Word]
    line: int
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    hosts: list[str] = field(default_factory=list)
    host_network: bool | None = None


def _base(word: str) -> str:
    return PurePosixPath(word).name if "/" in word else word


def _program_at(words: list[Word], i: int) -> tuple[str, str, int] | None:
    """(kind, launcher, index of the first argument) when ``words[i]`` starts a program
    kvcheck reads."""
    w = _base(words[i].text)
    if _PYTHON.fullmatch(w):
        j = i + 1
        while j < len(words) and words[j].text.startswith("-") and words[j].text != "-m":
            j += 1
        if j + 1 < len(words) and words[j].text == "-m":
            mod = words[j + 1].text
            if mod in SERVER_MODULES:
                return ("server", mod, j + 2)
            if mod == DYNAMO_MODULE or mod.startswith(DYNAMO_MODULE + "."):
                return ("server", DYNAMO_MODULE, j + 2)
            if mod in ROUTER_MODULES:
                return ("router", mod, j + 2)
        return None
    if w == "sglang" and i + 1 < len(words) and words[i + 1].text == "serve":
        return ("server", "sglang serve", i + 2)
    return None


def _prefix_facts(prefix: list[Word]) -> tuple[dict[str, str], str | None, list[str], bool | None]:
    env: dict[str, str] = {}
    hosts: list[str] = []
    image = None
    host_network: bool | None = None
    texts = [w.text for w in prefix]
    rt = next(
        (k for k, t in enumerate(texts) if _base(t) in _CONTAINER_RT and k + 1 < len(texts) and texts[k + 1] == "run"),
        None,
    )
    for k, t in enumerate(texts):
        if _ASSIGN.match(t):
            name, _, value = t.partition("=")
            env[name] = value
        elif t.startswith("--env=") and "=" in t[6:]:
            name, _, value = t[6:].partition("=")
            env[name] = value
        elif t in ("-w", "--nodelist") and k + 1 < len(texts):
            hosts.append(texts[k + 1])
        elif t.startswith("--nodelist=") or t.startswith("-w") and len(t) > 2 and not t.startswith("--"):
            hosts.append(t.split("=", 1)[1] if "=" in t else t[2:])
        elif _base(t) == "ssh" and k + 1 < len(texts):
            rest = [x for x in texts[k + 1 :] if not x.startswith("-")]
            if rest:
                hosts.append(rest[0].split("@")[-1])
    if rt is not None:
        opts = texts[rt + 2 :]
        host_network = any(o in ("--network=host", "--net=host") for o in opts) or any(
            o in ("--network", "--net") and k + 1 < len(opts) and opts[k + 1] == "host" for k, o in enumerate(opts)
        )
        if texts and not texts[-1].startswith("-") and len(texts) - 1 > rt + 1:
            image = texts[-1]
    return env, image, hosts, host_network


def find_launches(words: list[Word], file: str, scope: Scope, depth: int = 0) -> list[Launch]:
    """Every SGLang server / router start in one command (``words``), wrappers seen
    through; ``bash -c SCRIPT`` is read recursively (``depth`` guards the recursion)."""
    if depth > 8:
        return []
    for i in range(len(words)):
        if words[i].text == "eval" and i + 1 < len(words) and not words[i].quoted:
            # ``eval "$CMD"``: the shell joins the words and runs them as a new command
            # line (a launch line built in a string, ``CMD="$CMD --nnodes 2"``)
            env, image, hosts, hn = _prefix_facts(words[:i])
            text = " ".join(w.text for w in words[i + 1 :])
            found: list[Launch] = []
            for stmt, _ in words_of(text, file, words[i + 1].line, scope):
                if handle_assignments(stmt, scope, file):
                    continue
                for ln in find_launches(stmt, file, scope, depth + 1):
                    ln.env = {**env, **ln.env}
                    ln.image, ln.hosts = ln.image or image, ln.hosts or hosts
                    ln.host_network = ln.host_network if ln.host_network is not None else hn
                    found.append(ln)
            return found
        prog = _program_at(words, i)
        if prog:
            kind, launcher, a = prog
            env, image, hosts, hn = _prefix_facts(words[:i])
            return [Launch(kind, launcher, words[a:], words[i].line, env, image, hosts, hn)]
        if _base(words[i].text) in _SHELLS:
            j = i + 1
            while j < len(words) and words[j].text.startswith("-") and "c" not in words[j].text[1:]:
                j += 1
            if (
                j + 1 < len(words)
                and words[j].text.startswith("-")
                and not words[j].text.startswith("--")
                and "c" in words[j].text[1:]
            ):
                k = j + 1
                while k + 1 < len(words) and (
                    words[k].text == "--"
                    or (
                        words[k].text.startswith("-")
                        and not words[k].unresolved
                        and "\n" not in words[k].text
                        and " " not in words[k].text
                    )
                ):
                    k += 1  # bash -lc -- SCRIPT, bash -c -e SCRIPT: options end before the script
                script = words[k]
                env, image, hosts, hn = _prefix_facts(words[:i])
                # the inner shell sees the wrapper's environment
                inner_scope = scope.child(
                    {k: VarDef(v, Location(file, script.line), "literal") for k, v in env.items()}
                )
                out: list[Launch] = []
                for stmt, _ in words_of(script.text, file, script.line, inner_scope):
                    handle_assignments(stmt, inner_scope, file)
                    for ln in find_launches(stmt, file, inner_scope, depth + 1):
                        ln.env = {**env, **ln.env}
                        ln.image = ln.image or image
                        ln.hosts = ln.hosts or hosts
                        ln.host_network = ln.host_network if ln.host_network is not None else hn
                        out.append(ln)
                return out
    return []


def handle_assignments(words: list[Word], scope: Scope, file: str) -> bool:
    """``VAR=v ...`` alone, ``export VAR=v``, ``declare/local/readonly/typeset VAR=v``:
    record the variables in ``scope`` and return True. A value that still holds an
    unresolved reference is kept raw and expanded when used (so cycles are found)."""
    if not words:
        return False
    texts = [w.text for w in words]
    start = 0
    if texts[0] in ("export", "declare", "local", "readonly", "typeset"):
        start = 1
        while start < len(texts) and texts[start].startswith("-"):
            start += 1
    elif not all(_ASSIGN.match(t) for t in texts):
        return False
    done = False
    for w in words[start:]:
        if not _ASSIGN.match(w.text):
            continue
        name, _, value = w.text.partition("=")
        loc = Location(w.file or file, w.line)
        if w.unresolved and not w.single_quoted_only:
            # the word was expanded when the assignment ran, as a shell expands it: what
            # is left are references unset at that point (``X="$X --more"`` appends to
            # the earlier X, never refers to itself)
            scope.layers[0][name] = VarDef(value, loc, "partial", tuple(dict.fromkeys(w.unresolved)))
        else:
            scope.layers[0][name] = VarDef(value, loc, "literal")
        done = True
    return done


def instance_from_launch(
    launch: Launch,
    *,
    file: str,
    name: str,
    kind: str,
    location: Location | None = None,
    env: dict[str, str] | None = None,
    image: str | None = None,
    replicas: int = 1,
    nodes: int = 1,
    gpus: int | None = None,
    gpu_type: str | None = None,
    gpu_source: str = "",
    hosts: list[str] | None = None,
    host_network: bool | None = None,
) -> tuple[Instance | None, Problem | None]:
    """An ``Instance`` for a server launch, or ``(None, problem)`` when it is not a PD
    server (no ``--disaggregation-mode prefill|decode``; ``problem`` is None when the
    mode is ``null``/absent, so the caller decides whether that matters)."""
    args = launch.args
    args, config_problem = merge_config_file(args, file)
    launcher_args: list[str] = []
    if launch.launcher == DYNAMO_MODULE:
        args, launcher_args = split_dynamo(args)
    argv = [w.text for w in args]
    loc = location or Location(file, launch.line)
    mode = option_value(argv, "disaggregation_mode")
    if mode is None:
        # A misspelled --disaggregation-mode (``--disagregation-mode prefill``): the server
        # is meant as that role, and its own parser refuses the flag at start-up. Kept as
        # an instance of that role, so the pipeline reports the refusal at this line
        # (issue 14/15), not a missing role.
        mode = misspelled_mode(argv)
    words_unresolved = [w for w in args if w.unresolved]
    if mode not in (None, "prefill", "decode", "null"):
        word = _mode_word(args)
        if word is not None and not word.unresolved:
            refused = mode_refusal(mode)
            if refused is not None:
                close = [
                    c
                    for c in difflib.get_close_matches(mode.lower(), ("prefill", "decode"), n=1, cutoff=0.8)
                    if c[0] == mode[:1].lower()
                ]
                if close:  # "prefil", "Decode"; never "encode" (another word, not a typo of decode)
                    # ``prefil``: meant as that role; kept as an instance of it, so the
                    # pipeline reports the release's own refusal at this line (issue 14)
                    mode = close[0]
                else:
                    # ``encode``, ``language``: no role to keep it as; the refusal itself
                    at = Location(word.file or file, word.line)
                    return None, Problem(
                        "startup-argparse",
                        f"{at}: the server refuses to start: the argument parser of {refused[0]} refuses its flags: "
                        f"{refused[1]}",
                        at,
                        "Use --disaggregation-mode prefill or decode (or null for a server outside PD): the server "
                        "exits while parsing its flags.",
                    )
    if mode not in ("prefill", "decode"):
        # the role itself behind a variable: say so instead of skipping the server
        for k, w in enumerate(args):
            flag = resolve_option(w.text) if w.text.startswith("--") else None
            if flag is None or flag.dest != "disaggregation_mode":
                continue
            value_word = w if "=" in w.text else (args[k + 1] if k + 1 < len(args) else None)
            if value_word is not None and value_word.unresolved:
                names = ", ".join(value_word.unresolved)
                return None, Problem(
                    "unresolved-variable",
                    f"{Location(file, value_word.line)}: `{w.text} {value_word.text}`: {names} is not set, so the "
                    "server's role (prefill or decode) is unknown; pass --env or set it",
                    Location(file, value_word.line),
                    f"set {names} in the file, or pass it with --env FILE",
                )
        return None, config_problem
    arg_locations: dict[str, Location] = {}
    for w in args:
        if _is_option(w.text):
            arg_locations[w.text.split("=", 1)[0]] = Location(w.file or file, w.line)
    unresolved: list[Unresolved] = []
    seen: set[tuple[str, str | None]] = set()
    for w in words_unresolved:
        k = args.index(w)
        if w.text.startswith("-") and "=" in w.text:
            flag = w.text.split("=", 1)[0]
        elif k > 0 and _is_option(args[k - 1].text) and "=" not in args[k - 1].text and _takes_value(args[k - 1].text):
            flag = args[k - 1].text  # the option this word is the value of (not a bare --enable-x before it)
        else:
            flag = None
        for v in w.unresolved:
            if (v, flag) not in seen:
                seen.add((v, flag))
                unresolved.append(Unresolved(v, flag, Location(w.file or file, w.line), _written(v, w.text)))
    # a whole-arguments expansion ($EXTRA_ARGS, $(helper)) left unresolved can hold any
    # flag: it stays an unresolved-variable (unchecked), and is kept out of the args parsed
    loose = {
        k
        for k, w in enumerate(args)
        if w.unresolved
        and not w.text.startswith("-")
        and not (
            k > 0 and _is_option(args[k - 1].text) and "=" not in args[k - 1].text and _takes_value(args[k - 1].text)
        )
    }
    if loose:
        args = [w for k, w in enumerate(args) if k not in loose]
        argv = [w.text for w in args]
    argv, unresolved, symbolic = settle_addresses(args, argv, unresolved)
    port: int | None = None
    if any(u.flag and _dest(u.flag) == "port" for u in symbolic):
        pass  # the HTTP port is filled in at run time: unknown, not SGLang's default
    elif launch.launcher != DYNAMO_MODULE:
        p = option_value(argv, "port")
        port = int(p) if p and p.isdigit() else (SGLANG_DEFAULT_PORT if p is None else None)
    inst = Instance(
        role=mode,  # type: ignore[arg-type]
        name=name,
        location=loc,
        argv=argv,
        node_argvs=[argv],
        arg_locations=arg_locations,
        env={**(env or {}), **launch.env},
        replicas=replicas,
        nodes=nodes,
        gpus=gpus,
        image=image or launch.image,
        gpu_type=gpu_type,
        gpu_source=gpu_source,
        launcher=launch.launcher,
        launcher_args=launcher_args,
        hosts=list(hosts if hosts is not None else launch.hosts),
        unresolved=unresolved,
        symbolic=symbolic,
        port=port,
        host_network=host_network if host_network is not None else launch.host_network,
        kind=kind,
        node_locations=[loc],
    )
    return inst, config_problem


def take_launch(
    launch: Launch,
    dep: Deployment,
    non_pd: list[Location],
    *,
    file: str,
    router_name: str,
    router_image: str | None = None,
    **instance_args: Any,
) -> Instance | None:
    """One launch a reader found, into ``dep``: a PD router joins ``dep.routers``
    (``router_from_launch``, named ``router_name``); a server becomes an ``Instance``
    (``instance_from_launch(launch, file=file, **instance_args)``), returned for the
    reader to place. A problem it raises joins ``dep.problems``; a server outside PD
    (no ``--disaggregation-mode prefill|decode``, no problem) is noted in ``non_pd``.
    Returns None for a router or a launch that is no PD server."""
    if launch.kind == "router":
        r = router_from_launch(launch, file=file, name=router_name, image=router_image)
        if r is not None:
            dep.routers.append(r)
        return None
    inst, problem = instance_from_launch(launch, file=file, **instance_args)
    if problem:
        dep.problems.append(problem)
    if inst is None and problem is None:
        non_pd.append(Location(file, launch.line))
    return inst


def _written(name: str, text: str) -> str:
    """How ``text`` writes the reference to ``name`` (``${NAME:-x}``, ``$NAME``, ``$(NAME)``)."""
    m = re.search(
        r"\$\{"
        + re.escape(name)
        + r"(?:[^}]*)\}|\$\("
        + re.escape(name)
        + r"\)|\$"
        + re.escape(name)
        + r"(?![A-Za-z0-9_])",
        text,
    )
    return m.group(0) if m else ""
