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

import contextvars
import difflib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from kvcheck.errors import InputError
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
    "env_unresolved",
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
    # env names whose value holds references set nowhere -> those references
    env_unresolved: dict[str, tuple[str, ...]] = field(default_factory=dict)


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


def _boundaries(texts: list[str]) -> list[int]:
    """Indexes of the prefix words past which the shell's environment does not reach the
    program: ``docker|podman|... run`` (a container starts with the image's environment
    and only what ``-e``/``--env`` pass), ``ssh`` (the remote command runs in a fresh login
    environment), ``env -i`` (``--ignore-environment``, ``env -``)."""
    out = []
    for k, t in enumerate(texts):
        b = _base(t)
        if b in _CONTAINER_RT and k + 1 < len(texts) and texts[k + 1] == "run":
            out.append(k + 1)
        elif b == "ssh":
            out.append(k)
        elif b == "env":
            j = k + 1
            while j < len(texts) and texts[j].startswith("-"):
                if texts[j] in ("-i", "--ignore-environment", "-"):
                    out.append(j)
                j += 1
    return out


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
    cut = max(_boundaries(texts), default=-1)
    for k, t in enumerate(texts):
        if _ASSIGN.match(t):
            if k > cut:  # `X=1 docker run ...`: the docker client's variable, not the server's
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


def _passed_env(
    prefix: list[Word], scope: Scope, where: Location, unresolved: dict[str, tuple[str, ...]] | None = None
) -> dict[str, str]:
    """What the shell's exported environment (``Scope.environment``) passes to a program
    started after the wrapper words ``prefix``: all of it through ``nohup``, ``srun``
    (``--export=ALL``, its default), ``numactl``, ``env VAR=v``...; none past a boundary
    (``_boundaries``), but the names a container runtime passes on by name (``docker run
    -e VAR``, ``--env VAR``: the value the shell exports); ``env -u VAR`` removes one.
    ``unresolved``: filled for the names passed whose value is not known (then the
    prefix words' own ``VAR=$UNSET``)."""
    texts = [w.text for w in prefix]
    unknown: dict[str, tuple[str, ...]] = {}
    exported = scope.environment(where, unknown)
    env = dict(exported)
    bounds = set(_boundaries(texts))
    in_container = False
    for k, t in enumerate(texts):
        if k in bounds:
            env, in_container = {}, _base(texts[k - 1]) in _CONTAINER_RT if k else False
            continue
        if in_container and t in ("-e", "--env") and k + 1 < len(texts) and "=" not in texts[k + 1]:
            if texts[k + 1] in exported:
                env[texts[k + 1]] = exported[texts[k + 1]]
        elif in_container and t.startswith("--env=") and "=" not in t[6:] and t[6:] in exported:
            env[t[6:]] = exported[t[6:]]
        elif t == "-u" and k + 1 < len(texts) and any(_base(x) == "env" for x in texts[:k]):
            env.pop(texts[k + 1], None)
        elif t.startswith("--unset="):
            env.pop(t[8:], None)
    if unresolved is not None:
        unresolved.update({n: refs for n, refs in unknown.items() if n in env})
        cut = max(bounds, default=-1)
        for k, w in enumerate(prefix):
            if k > cut and _ASSIGN.match(w.text):
                name = w.text.split("=", 1)[0]
                if w.unresolved:
                    unresolved[name] = tuple(dict.fromkeys(w.unresolved))
                else:
                    unresolved.pop(name, None)
    return env


# How deep ``bash -c`` / ``eval`` / here-document scripts nest before kvcheck stops (a
# container's ``sh -c`` running ``bash -lc`` running a generated script is three)
MAX_SHELL_DEPTH = 8


def find_launches(words: list[Word], file: str, scope: Scope, depth: int = 0) -> list[Launch]:
    """Every SGLang server / router start in one command (``words``), wrappers seen
    through; ``bash -c SCRIPT`` (a here-document script is one) and ``eval`` are read
    recursively. Raises ``InputError`` past ``MAX_SHELL_DEPTH`` nested shells: a launch
    nested deeper was dropped unread, so the servers read were not all the script starts
    (a pair checked without the one that differs)."""
    if depth > MAX_SHELL_DEPTH:
        raise InputError(
            f"line {words[0].line if words else '?'}: shells nest more than {MAX_SHELL_DEPTH} deep (bash -c, eval, "
            "here-document scripts run by a shell); kvcheck cannot follow them: pass the launch lines in a file of "
            "their own",
            source=file,
        )
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
            unknown: dict[str, tuple[str, ...]] = {}
            env = {**_passed_env(words[:i], scope, Location(file, words[i].line), unknown), **env}
            return [Launch(kind, launcher, words[a:], words[i].line, env, image, hosts, hn, unknown)]
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
                # the inner shell sees the wrapper's environment; it exports what it was
                # passed (the outer shell's exports that reach it, and the prefixes)
                inner_scope = scope.child(
                    {k: VarDef(v, Location(file, script.line), "literal") for k, v in env.items()}
                )
                inner_scope.exported = set(_passed_env(words[:i], scope, Location(file, script.line))) | set(env)
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
    """The shell statements that set or export variables, recorded in ``scope``; True when
    ``words`` is one (it starts no program):

    * ``VAR=v ...`` alone, ``export VAR=v``, ``declare/local/readonly/typeset VAR=v``:
      the variable. A value that still holds an unresolved reference is kept raw and
      expanded when used (so cycles are found);
    * exports (POSIX ``export``; bash's ``declare -x``/``typeset -x``/``local -x``; ``set
      -a``/``set -o allexport``, under which every assignment is exported): the name joins
      ``scope.exported``, the environment of every process started after it
      (``Scope.environment``). ``export VAR`` alone exports the variable's current (or
      later) value; ``export -n VAR`` / ``declare +x VAR`` take it back out;
    * ``unset [-v] VAR...``: the script's own assignment and its export are gone.
    A plain ``VAR=v`` of a name not exported stays a shell variable (no process sees it)."""
    if not words:
        return False
    texts = [w.text for w in words]
    head = texts[0]
    if head == "set":
        return _handle_set(texts[1:], scope)
    if head == "unset":
        if any(t.startswith("-") and "f" in t for t in texts[1:]):
            return True  # unset -f NAME: a function, not a variable
        for t in texts[1:]:
            if not t.startswith("-"):
                scope.layers[0].pop(t, None)
                scope.exported.discard(t)
        return True
    start = 0
    export: bool | None = None  # True: export the names; False: take them out; None: as they are
    if head in ("export", "declare", "local", "readonly", "typeset"):
        start = 1
        export = True if head == "export" else None
        while start < len(texts) and texts[start][:1] in ("-", "+") and not _ASSIGN.match(texts[start]):
            opt = texts[start]
            if head == "export" and opt.startswith("-") and "n" in opt[1:]:
                export = False
            elif head != "export" and "x" in opt[1:]:
                export = opt.startswith("-")
            if "f" in opt[1:]:
                return True  # export -f / declare -f: functions, not variables
            start += 1
    elif not all(_ASSIGN.match(t) for t in texts):
        return False
    done = False
    for w in words[start:]:
        if not _ASSIGN.match(w.text):
            if start and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", w.text):
                if export is True:
                    scope.exported.add(w.text)  # export VAR: its value, now or once assigned
                elif export is False:
                    scope.exported.discard(w.text)
                done = True
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
        if export is True or (export is None and scope.allexport):
            scope.exported.add(name)
        elif export is False:
            scope.exported.discard(name)
        done = True
    return done


def _handle_set(args: list[str], scope: Scope) -> bool:
    """``set -a`` / ``set -o allexport`` (and ``+``, turning it off) among ``set``'s options
    (``set -euxa``): ``scope.allexport``. Any ``set`` statement starts no program."""
    for k, t in enumerate(args):
        if t == "--":
            break
        if t in ("-o", "+o") and k + 1 < len(args) and args[k + 1] == "allexport":
            scope.allexport = t == "-o"
        elif re.fullmatch(r"[-+][a-zA-Z]+", t) and "a" in t[1:]:
            scope.allexport = t.startswith("-")
    return True


# A pair side's file (``--prefill/--decode FILE``, ``kvcheck.cluster.pair_input``): the role
# the user names it as. A server in it whose --disaggregation-mode is not prefill or decode
# (absent, null, a typo, another mode) is kept as an instance of that role, so that the
# pair path reports it as before (the ``disaggregation-mode`` check, the server's own
# start-up refusal) instead of dropping it. None on the ``-f`` path.
SIDE_ROLE: contextvars.ContextVar[str | None] = contextvars.ContextVar("kvcheck_side_role", default=None)


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
    given = {id(w) for w in args}
    notes: list[Problem] = []
    args, config_problem = merge_config_file(args, file, notes)
    inner = frozenset(w.text for w in args if id(w) not in given and not w.text.startswith("--"))
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
    side = SIDE_ROLE.get()
    if side is not None and mode not in ("prefill", "decode"):
        mode = side
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
                from kvcheck.sources.quoting import reference_shown

                names = ", ".join(reference_shown(n) for n in value_word.unresolved)
                return None, Problem(
                    "unresolved-variable",
                    f"{Location(file, value_word.line)}: `{w.text.split('=', 1)[0]} "
                    f"{reference_shown(value_word.text.split('=', 1)[-1] if value_word is w else value_word.text)}"
                    f"`: {names} is not set, so the server's role (prefill or decode) is unknown; pass --env or set it",
                    Location(file, value_word.line),
                    f"set {names} in the file, or pass it with --env FILE",
                    hides_role=True,
                )
        if config_problem is not None:
            config_problem.hides_role = True  # --disaggregation-mode may be in the file not read
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
    unresolved += env_unresolved(launch.env_unresolved, launch.env, loc)
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
        args_hidden=config_problem,
        inner_values=inner,
        read_notes=notes,
    )
    # the server is kept: the pipeline reports the file it could not take as this
    # instance's (its args beyond the line's are unknown, kvcheck.cluster.instances)
    return inst, None


def env_unresolved(refs: dict[str, tuple[str, ...]], env: dict[str, str], at: Location) -> list[Unresolved]:
    """An ``Unresolved`` per KV-relevant environment variable of a server whose value is
    not known (``kvcheck.sides.kv_relevant_env``: the NIXL backend, UCX transports...):
    ``refs`` maps each such name to the references its value holds that are set nowhere
    (a ``VAR=$UNSET`` prefix, ``export VAR=$UNSET``). Others never reach a decision."""
    from kvcheck.sides import kv_relevant_env

    out = []
    for name, missing in refs.items():
        if kv_relevant_env(name):
            # a name set with no value in the file at all: a Kubernetes ``valueFrom``
            # Secret/ConfigMap, a Compose ``environment: [NAME]`` taken from the caller
            shown = f"{name}={env[name]}" if name in env else f"{name} (its value is not in the file)"
            for v in missing or (name,):
                out.append(Unresolved(v, None, at, shown, env_var=name))
    return out


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
