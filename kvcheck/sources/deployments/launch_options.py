"""SGLang options in a launch line: what an option token means, and what a line's options say.

A token is resolved as SGLang's own parser resolves it (argparse's prefix rules through
kvcheck's flag table, ``kvcheck.sglang.flags.FlagTable``; ``resolve_option``), so the
role (``--disaggregation-mode``), the port and the node rank are read the way the server
reads them. Here too: a misspelled ``--disaggregation-mode`` (``misspelled_mode``), a
mode value every modeled release's parser refuses (``mode_refusal``, its ``choices`` in
``server_args.py``, 0.5.0rc2 .. 0.5.23), the split of a Dynamo worker's own flags from
SGLang's (``split_dynamo``, ``DYNAMO_FLAGS``: Dynamo's ``parse_known_args`` in
``components/src/dynamo/sglang/args.py``) and a ``--config YAML`` merged in front of the
line (``merge_config_file``: SGLang's ``ConfigArgumentMerger.merge_config_with_args``).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Mapping
from pathlib import PurePath
from types import MappingProxyType
from typing import Any

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Location, Problem
from kvcheck.sources.deployments.shell import Word

# ``--config-file IMAGE_PATH=LOCAL_PATH``: copies of config files that sit inside the
# image (``--config /etc/sglang/decode.yaml``), set by ``read_deployments``
CONFIG_FILES: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "kvcheck_config_files", default=MappingProxyType({})
)

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


def merge_config_file(
    args: list[Word], file: str, notes: list[Problem] | None = None
) -> tuple[list[Word], Problem | None]:
    """``--config PATH`` (its own token, as SGLang requires) -> the args SGLang makes of
    that YAML file, first, then the rest of the line (``ConfigArgumentMerger.
    merge_config_with_args``, restated by ``FlagTable.config_to_argv``), each config arg
    located at its key's line in the config file. PATH is looked up as written, then
    beside the deployment file; when it cannot be read (a path inside the image) the
    line is kept as is and a ``config-not-read`` problem says the args in it are unknown.
    A key written twice in the file keeps its later value (SGLang 0.5.23's
    ``ConfigArgumentMerger._parse_yaml_config``: ``yaml.safe_load``); each is a
    ``duplicate-key`` warning appended to ``notes`` when given."""
    idx = [k for k, w in enumerate(args) if w.text == "--config"]
    if len(idx) != 1 or idx[0] + 1 >= len(args):
        return args, None
    k = idx[0]
    raw = args[k + 1].text
    from kvcheck.sources.deployments.yamlnodes import LMap, load_documents
    from kvcheck.sources.files import inner_config_problem, read_inner_text

    loc = Location(file, args[k].line)
    if PurePath(raw).suffix.lower() not in (".yaml", ".yml"):
        # SGLang refuses it before reading it (ConfigArgumentMerger._validate_yaml_file,
        # 0.5.3-0.5.23: ValueError "Config file must be YAML format"): never read here
        from kvcheck.sources.quoting import shown

        return args, Problem(
            "config-refused",
            f"{loc}: --config {shown(raw)}: SGLang's config merger refuses a file whose name does not end in .yaml or "
            ".yml (ConfigArgumentMerger._validate_yaml_file: ValueError at start-up); kvcheck does not read it",
            loc,
            "Give --config a .yaml (or .yml) file.",
        )
    found, root, not_read = find_config_file(raw, file, loc)
    if not_read is not None or found is None:
        return args, not_read
    from kvcheck.sources.deployments.sourcing import note_read_inside

    dups: list = []
    docs = load_documents(
        read_inner_text(found, root, field="--config", source=file, limit=MAX_CONFIG_BYTES), str(found), dups
    )
    note_read_inside(found)
    if notes is not None and dups:
        from kvcheck.sources.deployments.sglang_config import MERGER, duplicate_problems

        notes.extend(duplicate_problems(dups, str(found), MERGER))
    data = docs[0] if docs else LMap()
    if not isinstance(data, dict):
        return args, Problem("config-not-read", f"{loc}: --config {raw}: not a YAML mapping of flags", loc, "")
    table = _table()
    words: list[Word] = []
    for key, value in data.items():
        line = data.line_of(key) if isinstance(data, LMap) else 1
        try:
            words.extend(
                Word(t, line, [], True, False, str(found)) for t in table.config_to_argv({key: value}, str(found))
            )
        except InputError:
            continue  # the key SGLang refuses (reported below); the others still say what they say
    problem = inner_config_problem(table, data, str(found))  # names the key, never the value
    if problem is not None:
        # the keys it takes (the role among them) are merged; the server is the file's
        # ``config-refused`` (its args are not all known, ``Instance.args_hidden``)
        return words + args[:k] + args[k + 2 :], Problem(
            "config-refused", f"{loc}: --config {raw}: {problem}", loc, "fix the --config file as SGLang's message says"
        )
    return words + args[:k] + args[k + 2 :], None


def find_config_file(raw: str, file: str, loc: Location) -> tuple[Any, Any, Problem | None]:
    """Where the ``--config RAW`` of a launch line in ``file`` is read: ``(path, the
    directory it is confined to, None)``, or ``(None, dir, problem)`` with the
    ``config-not-read`` problem when kvcheck cannot read it: a path inside the image (not
    here), or outside the read root. ``--config-file RAW=LOCAL`` (``CONFIG_FILES``) is read
    first; a mapping to no file is bad input (``InputError``). Shared by the ``-f`` reader
    and a pair's launch-line file (``kvcheck.cluster.pair_input``)."""
    from pathlib import Path

    from kvcheck.sources.files import within_root

    mapped = CONFIG_FILES.get().get(raw)
    if mapped is not None:
        cands = [Path(mapped)]
    else:
        cands = [Path(raw)] if Path(raw).is_absolute() else [Path(file).parent / raw, Path(raw)]
    found = next((c for c in cands if c.is_file()), None)
    root = found.parent if (found is not None and mapped is not None) else Path(file).parent
    if found is not None and not within_root(found, root):
        return (
            None,
            root,
            Problem(
                "config-not-read",
                f"{loc}: --config: the file is outside the directory kvcheck may read; the server args in it are not "
                "checked",
                loc,
                "keep the config file beside the deployment file, or pass --root DIR (a directory holding both)",
            ),
        )
    if found is None:
        if mapped is not None:
            raise InputError(f"--config-file {raw}={mapped}: {mapped} is not a readable file", source=file)
        return (
            None,
            root,
            Problem(
                "config-not-read",
                f"{loc}: --config {raw}: the file is inside the image (not here); the server args in it, and so this "
                "server, are not checked",
                loc,
                f"give kvcheck a copy: --config-file {raw}=LOCAL_PATH (or keep it beside the deployment file, same "
                "relative path)",
            ),
        )
    return found, root, None


def _takes_value(tok: str) -> bool:
    f = resolve_option(tok)
    return True if f is None else bool(getattr(f, "takes_value", True))


MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a --config YAML named in a launch line (kvcheck.sources.limits.MAX_FILE_BYTES)


def _is_option(tok: str) -> bool:
    return tok.startswith("--") or (len(tok) == 2 and tok[0] == "-" and tok[1].isalpha())


def _dest(flag: str) -> str | None:
    f = resolve_option(flag)
    return f.dest if f is not None else None
