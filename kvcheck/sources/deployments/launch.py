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
  (``DYNAMO_FLAGS``, from ``runtime_args.py`` / ``backend_args.py``) go to
  ``Instance.launcher_args``, anything else stays in ``argv`` for SGLang's own checks.
  Note: when ``--disaggregation-bootstrap-port`` is not given, Dynamo's worker reserves
  a free port itself (``_reserve_disaggregation_bootstrap_port`` in ``args.py``), so
  SGLang's default 8998 does not apply to a ``dynamo.sglang`` prefill;
* ``python -m sglang_router.launch_router`` (and the older
  ``sglang.srt.disaggregation.mini_lb`` / ``launch_lb``): the PD router.

The role comes from ``--disaggregation-mode`` only (matched with argparse's prefix
rules through kvcheck's flag table), never from a name.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType
from urllib.parse import urlsplit

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Instance, Location, Problem, Router, RouterPrefill, Unresolved
from kvcheck.sources.deployments.shell import Word, words_of
from kvcheck.sources.deployments.variables import Scope, VarDef

# ``--config-file IMAGE_PATH=LOCAL_PATH``: copies of config files that sit inside the
# image (``--config /etc/sglang/decode.yaml``), set by ``read_deployments``
CONFIG_FILES: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "kvcheck_config_files", default=MappingProxyType({})
)

SERVER_MODULES = ("sglang.launch_server",)
ROUTER_MODULES = (
    "sglang_router.launch_router",
    "sglang.srt.disaggregation.mini_lb",
    "sglang.srt.disaggregation.launch_lb",
)
DYNAMO_MODULE = "dynamo.sglang"
SGLANG_DEFAULT_PORT = 30000  # ServerArgs.port default (sglang/srt/server_args.py, 0.5.x)

# Dynamo worker flags (value-taking: True; bare or --x/--no-x: False), from ai-dynamo/dynamo
# components/src/dynamo/common/configuration/groups/runtime_args.py and
# components/src/dynamo/sglang/backend_args.py (2025-2026 releases). --connector and
# --output-modalities take several values (nargs="*").
DYNAMO_FLAGS: dict[str, bool | str] = {
    "--namespace": True,
    "--endpoint": True,
    "--kv-state-endpoint": True,
    "--discovery-backend": True,
    "--request-plane": True,
    "--response-plane": True,
    "--event-plane": True,
    "--fpm-trace": False,
    "--connector": "*",
    "--dyn-tool-call-parser": True,
    "--dyn-reasoning-parser": True,
    "--dyn-default-thinking-mode": True,
    "--exclude-tools-when-tool-choice-none": False,
    "--dyn-enable-structural-tag": False,
    "--dyn-structural-tag-scope": True,
    "--dyn-structural-tag-schema": True,
    "--dyn-structural-tag": "?",
    "--custom-jinja-template": True,
    "--endpoint-types": True,
    "--dyn-endpoint-types": True,
    "--dump-config-to": True,
    "--multimodal-embedding-cache-capacity-gb": True,
    "--multimodal-embedding-cache-publisher": False,
    "--output-modalities": "*",
    "--media-output-fs-url": True,
    "--media-output-http-url": True,
    "--health-check-payload": True,
    "--engine-request-limit": True,
    "--tcp-tls-cert-path": True,
    "--tcp-tls-key-path": True,
    "--tcp-tls-ca-cert-path": True,
    "--tcp-tls-insecure": False,
    "--tcp-tls-server-name": True,
    "--tcp-tls-handshake-timeout": True,
    "--tcp-tls-client-cert-path": True,
    "--tcp-tls-client-key-path": True,
    "--tcp-tls-client-ca-cert-path": True,
    "--nats-tls-ca-cert-path": True,
    "--nats-tls-insecure": False,
    "--nats-tls-client-cert-path": True,
    "--nats-tls-client-key-path": True,
    "--use-sglang-tokenizer": False,
    "--multimodal-processor": False,
    "--multimodal-encode-worker": False,
    "--multimodal-worker": False,
    "--embedding-worker": False,
    "--image-diffusion-worker": False,
    "--disagg-config": True,
    "--disagg-config-key": True,
    "--video-generation-worker": False,
    "--afd-attention-ratio": True,
    "--afd-ffn-endpoint": True,
    "--afd-microbatch-size": True,
    "--afd-sync-timeout-ms": True,
    "--migration-limit": True,
    "--store-kv": True,
    "--dyn-tool-call-parser-name": True,
    "--use-kv-events": False,
}

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


# -- options ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _table():
    from kvcheck.sglang.flags import FlagTable

    return FlagTable.load()


def resolve_option(token: str):
    """The SGLang ``Flag`` a ``--option`` (or ``--option=value``) token means under
    argparse's prefix rules, or None when SGLang has no such (unique) option."""
    return _resolve_name(token.split("=", 1)[0])


@functools.lru_cache(maxsize=4096)
def _resolve_name(name: str):
    try:
        return _table().resolve(name, underscores=False)
    except InputError:
        return None
    except Exception:
        return None


def misspelled_mode(argv: list[str]) -> str | None:
    """``prefill``/``decode`` when ``argv`` gives that value to an option SGLang does not
    have whose name is a near miss of ``--disaggregation-mode``, else None."""
    import difflib

    for k, tok in enumerate(argv):
        if not tok.startswith("--") or resolve_option(tok) is not None:
            continue
        name, _, value = tok.partition("=")
        if not value and k + 1 < len(argv):
            value = argv[k + 1]
        if (
            value in ("prefill", "decode")
            and difflib.SequenceMatcher(None, name, "--disaggregation-mode").ratio() >= 0.8
        ):
            return value
    return None


def _mode_word(args: list[Word]) -> Word | None:
    """The word holding ``--disaggregation-mode``'s (last) value."""
    out = None
    for k, w in enumerate(args):
        flag = resolve_option(w.text) if w.text.startswith("--") else None
        if flag is not None and flag.dest == "disaggregation_mode":
            out = w if "=" in w.text else (args[k + 1] if k + 1 < len(args) else None)
    return out


@functools.lru_cache(maxsize=64)
def mode_refusal(mode: str) -> tuple[str, str] | None:
    """(releases, the parser's text) when every modeled release's argument parser refuses
    ``--disaggregation-mode MODE`` (its ``choices``: ``null``, ``prefill``, ``decode`` in
    every release 0.5.0rc2 .. 0.5.23, ``server_args.py`` / ``ServerArgs`` field metadata);
    None when some release accepts it (a server outside PD there)."""
    from kvcheck.release.version import span
    from kvcheck.sglang.flags import FlagTable, modeled_releases

    releases = list(modeled_releases())
    text = None
    for v in releases:
        table = FlagTable.load(v)
        flag = table.resolve("--disaggregation-mode", underscores=False)
        if flag is None or not flag.choices or mode in flag.choices:
            return None
        if text is None or v == releases[-1]:
            try:
                table.parse_argv(["--disaggregation-mode", mode], "")
            except InputError as exc:
                text = str(exc).split("field 'disaggregation_mode': ", 1)[-1]
    if text is None:
        return None
    return (f"every modeled release (SGLang {span(releases)})", text)


def option_value(argv: list[str], dest: str) -> str | None:
    """The last value given to the SGLang option storing into ``dest`` in ``argv``."""
    value = None
    for k, tok in enumerate(argv):
        if not tok.startswith("--"):
            continue
        flag = resolve_option(tok)
        if flag is None or flag.dest != dest:
            continue
        if "=" in tok:
            value = tok.split("=", 1)[1]
        elif flag.takes_value and k + 1 < len(argv):
            value = argv[k + 1]
        else:
            value = "true"
    return value


def split_dynamo(words: list[Word]) -> tuple[list[Word], list[str]]:
    """Dynamo worker args -> (SGLang args, Dynamo's own args), as Dynamo's
    ``parse_known_args`` splits them (``DYNAMO_FLAGS``, ``--dyn-*``, ``--no-<flag>``)."""
    sg: list[Word] = []
    dyn: list[str] = []
    k = 0
    while k < len(words):
        tok = words[k].text
        name = tok.split("=", 1)[0]
        base = "--" + name[5:] if name.startswith("--no-") else name
        arity = DYNAMO_FLAGS.get(name, DYNAMO_FLAGS.get(base))
        if arity is None and name.startswith(("--dyn-", "--no-dyn-")):
            arity = True if name.startswith("--dyn-") else False
        if arity is None or (
            name.startswith("--no-") and base not in DYNAMO_FLAGS and not name.startswith("--no-dyn-")
        ):
            sg.append(words[k])
            k += 1
            continue
        dyn.append(tok)
        k += 1
        if "=" in tok or arity is False:
            continue
        if arity is True:
            if k < len(words):
                dyn.append(words[k].text)
                k += 1
        else:  # "*" / "?": values until the next option
            while k < len(words) and not words[k].text.startswith("-"):
                dyn.append(words[k].text)
                k += 1
                if arity == "?":
                    break
    return sg, dyn


def merge_config_file(args: list[Word], file: str) -> tuple[list[Word], Problem | None]:
    """``--config PATH`` (its own token, as SGLang requires) -> the args SGLang makes of
    that YAML file, first, then the rest of the line (``ConfigArgumentMerger.
    merge_config_with_args``, restated by ``FlagTable.config_to_argv``), each config arg
    located at its key's line in the config file. PATH is looked up as written, then
    beside the deployment file; when it cannot be read (a path inside the image) the
    line is kept as is and a ``config-not-read`` problem says the args in it are unknown."""
    idx = [k for k, w in enumerate(args) if w.text == "--config"]
    if len(idx) != 1 or idx[0] + 1 >= len(args):
        return args, None
    k = idx[0]
    raw = args[k + 1].text
    from pathlib import Path

    from kvcheck.sources.deployments.yamlnodes import LMap, load_documents
    from kvcheck.sources.files import inner_config_problem, read_inner_text, within_root

    mapped = CONFIG_FILES.get().get(raw)
    if mapped is not None:
        cands = [Path(mapped)]
    else:
        cands = [Path(raw)] if Path(raw).is_absolute() else [Path(file).parent / raw, Path(raw)]
    found = next((c for c in cands if c.is_file()), None)
    loc = Location(file, args[k].line)
    root = found.parent if (found is not None and mapped is not None) else Path(file).parent
    if found is not None and not within_root(found, root):
        return args, Problem(
            "config-not-read",
            f"{loc}: --config: the file is outside the directory kvcheck may read; the server args in it are not "
            "checked",
            loc,
            "keep the config file beside the deployment file, or pass --root DIR (a directory holding both)",
        )
    if found is None:
        if mapped is not None:
            raise InputError(f"--config-file {raw}={mapped}: {mapped} is not a readable file", source=file)
        return args, Problem(
            "config-not-read",
            f"{loc}: --config {raw}: the file is inside the image (not here); the server args in it, and so this "
            "server, are not checked",
            loc,
            f"give kvcheck a copy: --config-file {raw}=LOCAL_PATH (or keep it beside the deployment file, same "
            "relative path)",
        )
    docs = load_documents(
        read_inner_text(found, root, field="--config", source=file, limit=MAX_CONFIG_BYTES), str(found)
    )
    data = docs[0] if docs else LMap()
    if not isinstance(data, dict):
        return args, Problem("config-not-read", f"{loc}: --config {raw}: not a YAML mapping of flags", loc, "")
    table = _table()
    words: list[Word] = []
    try:
        for key, value in data.items():
            line = data.line_of(key) if isinstance(data, LMap) else 1
            words.extend(
                Word(t, line, [], True, False, str(found)) for t in table.config_to_argv({key: value}, str(found))
            )
    except InputError:
        pass
    problem = inner_config_problem(table, data, str(found))  # names the key, never the value
    if problem is not None:
        return args, Problem(
            "config-refused", f"{loc}: --config {raw}: {problem}", loc, "fix the --config file as SGLang's message says"
        )
    return words + args[:k] + args[k + 2 :], None


def _takes_value(tok: str) -> bool:
    f = resolve_option(tok)
    return True if f is None else bool(getattr(f, "takes_value", True))


MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a --config YAML named in a launch line (kvcheck.sources.limits.MAX_FILE_BYTES)


def _is_option(tok: str) -> bool:
    return tok.startswith("--") or (len(tok) == 2 and tok[0] == "-" and tok[1].isalpha())


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


# Options whose value is where a server listens or finds its peers, or which node it is:
# filled in at run time (a pod IP, a node rank from the scheduler), they shape no KV
# region and no transfer decision. Unresolved, they are checked for consistency across
# an instance's nodes (the same symbol on every node) and reported as info, not unchecked.
ADDRESS_DESTS = frozenset(
    {
        "host",
        "port",
        "dist_init_addr",
        "node_rank",
        "nccl_port",
        "disaggregation_bootstrap_port",
        "grpc_port",
        "engine_info_bootstrap_port",
        "encoder_bootstrap_port",
        "gated_launch_port",
        "smg_http_sidecar_port",
    }
)
# of these, the ones SGLang reads as integers: an unresolved one cannot be parsed as written
_INT_ADDRESS_DESTS = ADDRESS_DESTS - {"host", "dist_init_addr"}


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


def _dest(flag: str) -> str | None:
    f = resolve_option(flag)
    return f.dest if f is not None else None


def settle_addresses(
    args: list[Word], argv: list[str], unresolved: list[Unresolved]
) -> tuple[list[str], list[Unresolved], list[Unresolved]]:
    """Split the unresolved values of address, port and rank options (``ADDRESS_DESTS``)
    from the rest -> (argv, unresolved, symbolic). A textual one (``--host ${POD_IP}``,
    ``--dist-init-addr <ADDR>:5000``) stays as written: the same symbol on every node is
    consistent; an integer one is taken out of ``argv`` (``--port $PORT``: unknown), except
    ``--node-rank``, which becomes 0 (``argv`` is node rank 0's; the readers give the other
    nodes their ranks)."""
    if not unresolved:
        return argv, unresolved, []
    symbolic = [u for u in unresolved if u.flag and _dest(u.flag) in ADDRESS_DESTS]
    if not symbolic:
        return argv, unresolved, []
    rest = [u for u in unresolved if u not in symbolic]
    drop = {u.flag for u in symbolic if _dest(u.flag or "") in _INT_ADDRESS_DESTS}
    out: list[str] = []
    k = 0
    while k < len(argv):
        tok = argv[k]
        name = tok.split("=", 1)[0]
        if name in drop and tok.startswith("--"):
            has_eq = "=" in tok
            value_word = args[k] if has_eq else (args[k + 1] if k + 1 < len(args) else None)
            if value_word is not None and value_word.unresolved:
                if _dest(name) == "node_rank":
                    out += [f"{name}=0"] if has_eq else [name, "0"]
                k += 1 if has_eq else 2
                continue
        out.append(tok)
        k += 1
    return out, rest, symbolic


def set_node_rank(argv: list[str], rank: int) -> list[str]:
    """``argv`` with its ``--node-rank`` value set to ``rank`` (added when absent)."""
    out = list(argv)
    for k, tok in enumerate(out):
        if tok.startswith("--") and _dest(tok.split("=", 1)[0]) == "node_rank":
            if "=" in tok:
                out[k] = tok.split("=", 1)[0] + f"={rank}"
            elif k + 1 < len(out):
                out[k + 1] = str(rank)
            return out
    return out + ["--node-rank", str(rank)]


def rank_is_symbolic(inst: Instance) -> bool:
    return any(u.flag and _dest(u.flag) == "node_rank" for u in inst.symbolic)


def router_from_launch(launch: Launch, *, file: str, name: str = "", image: str | None = None) -> Router | None:
    """A ``Router`` for a router launch with ``--pd-disaggregation`` (or the mini load
    balancer, PD by construction); None for a router that is not PD."""
    argv = [w.text for w in launch.args]
    pd = launch.launcher != "sglang_router.launch_router" or any(
        t == "--pd-disaggregation" or t.startswith("--pd-dis") for t in argv
    )
    if not pd:
        return None
    router = Router(location=Location(file, launch.line), argv=argv, name=name, image=image or launch.image)
    mini_ports: list[str] = []
    k = 0
    while k < len(argv):
        tok = argv[k]
        opt, eq, val = tok.partition("=")
        if opt in ("--prefill", "--prefill-url", "--prefill-urls"):
            urls: list[str] = [val] if eq else []
            k += 1
            while not eq and k < len(argv) and not argv[k].startswith("--"):
                urls.append(argv[k])
                k += 1
            # --prefill URL [BOOTSTRAP_PORT]: a bare port (or "none") follows its URL
            i = 0
            while i < len(urls):
                url = urls[i]
                bp = None
                if i + 1 < len(urls) and (urls[i + 1].isdigit() or urls[i + 1].lower() == "none"):
                    bp = int(urls[i + 1]) if urls[i + 1].isdigit() else None
                    i += 1
                router.prefills.append(RouterPrefill(url=url, bootstrap_port=bp))
                i += 1
            continue
        if opt in ("--decode", "--decode-url", "--decode-urls"):
            vals = [val] if eq else []
            k += 1
            while not eq and k < len(argv) and not argv[k].startswith("--"):
                vals.append(argv[k])
                k += 1
            router.decodes.extend(vals)
            continue
        if opt == "--prefill-bootstrap-ports":
            # the older mini load balancer: one port per --prefill URL, in order
            k += 1
            vals = [val] if eq else []
            while not eq and k < len(argv) and not argv[k].startswith("--"):
                vals.append(argv[k])
                k += 1
            mini_ports.extend(vals)
            continue
        if opt == "--service-discovery":
            router.service_discovery = True
        k += 1
    for p, port in zip(router.prefills, mini_ports, strict=False):
        if p.bootstrap_port is None and port.isdigit():
            p.bootstrap_port = int(port)
    return router


# -- linking and multi-node ----------------------------------------------------------


def _host_port(url: str) -> tuple[str, int | None]:
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
    except ValueError:  # "http://${URLS[$i]}:8000": brackets that are no IPv6 address
        return "", None
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return (parts.hostname or ""), port


_LOCAL = {"127.0.0.1", "localhost", "0.0.0.0", "::1", ""}


def link_router(router: Router, instances: list[Instance]) -> None:
    """Fill ``RouterPrefill.instance`` and ``Router.decode_instances`` by matching each
    URL's port to an instance's ``port`` (role-aware), then its host to the instance's
    hosts or name; left None when ambiguous or not found."""

    def pick(url: str, role: str) -> str | None:
        host, port = _host_port(url)
        cands = [i for i in instances if i.role == role and (i.port == port or i.port is None)]
        if not cands:
            return None
        label = host.split(".")[0]

        def names(i: Instance) -> list[str]:
            # a workload's DNS names start with its name: "pd-prefill-0.s-pd-prefill"
            # for RBG role "prefill" of group "pd"; a Service named like the Deployment
            parts = i.name.split("/")
            return ["-".join(parts[:k]) for k in range(len(parts), 0, -1)]

        by_host = [
            i
            for i in cands
            if host in i.hosts or (label and any(label.startswith(h.split(".")[0]) for h in i.hosts if h))
        ]
        if not by_host and label:
            # most specific name first: "pd-prefill-engine", then "pd-prefill", then "pd"
            for level in range(3):
                hit = [
                    i
                    for i in cands
                    if level < len(names(i)) and (label == names(i)[level] or label.startswith(names(i)[level] + "-"))
                ]
                if len(hit) == 1:
                    by_host = hit
                    break
        if len(by_host) == 1:
            return by_host[0].name
        if host in _LOCAL:
            local = [i for i in cands if not i.hosts or any(h in _LOCAL for h in i.hosts)]
            exact = [i for i in local if i.port == port]
            if len(exact) == 1:
                return exact[0].name
        exact = [i for i in cands if i.port == port]
        if len(exact) == 1:
            return exact[0].name
        if len(cands) == 1:
            return cands[0].name
        return None

    for p in router.prefills:
        p.instance = pick(p.url, "prefill")
    router.decode_instances = [pick(u, "decode") for u in router.decodes]


def merge_multinode(instances: list[Instance]) -> list[Instance]:
    """Launch lines that are the node ranks of one multi-node instance (same role,
    ``--dist-init-addr`` and ``--nnodes`` > 1, different ``--node-rank``) -> one
    ``Instance`` with ``nodes`` = ``--nnodes`` and one argv per node, rank order."""
    groups: dict[tuple, list[tuple[int, Instance]]] = {}
    out: list[Instance] = []
    # the rendezvous addresses some line of several nodes names: a line with the same
    # --dist-init-addr but another --nnodes (1, or none) is a node of that instance whose
    # flags disagree (the multinode-args check names it), never an instance of its own
    multi = {
        (i.role, option_value(i.argv, "dist_init_addr"), i.launcher)
        for i in instances
        if (option_value(i.argv, "nnodes") or "").isdigit() and int(option_value(i.argv, "nnodes") or 0) > 1
    }
    for inst in instances:
        if inst.nodes > 1 and len(inst.node_argvs) == inst.nodes:
            out.append(inst)  # already one argv per node (a line run on every node)
            continue
        addr = option_value(inst.argv, "dist_init_addr")
        rank = option_value(inst.argv, "node_rank")
        key = (inst.role, addr, inst.launcher)
        if addr and key in multi:
            groups.setdefault(key, []).append((int(rank) if rank and rank.isdigit() else 0, inst))
            if len(groups[key]) == 1:
                out.append(inst)
            continue
        out.append(inst)
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        head = members[0][1]
        counts = [int(n) for n in (option_value(m[1].argv, "nnodes") or "1" for m in members) if n.isdigit()]
        head.nodes = max(counts or [1])
        head.argv = members[0][1].argv
        head.node_argvs = [m[1].argv for m in members]
        head.node_locations = [m[1].location for m in members]
        for _, m in members[1:]:
            for k, v in m.arg_locations.items():
                head.arg_locations.setdefault(k, v)
            head.unresolved.extend(u for u in m.unresolved if u not in head.unresolved)
            for h in m.hosts:
                if h not in head.hosts:
                    head.hosts.append(h)
    return out
