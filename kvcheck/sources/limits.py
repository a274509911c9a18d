"""Limits on everything kvcheck reads: files, YAML, HTTP bodies, JSON depth, log lines,
and the values of a model's ``config.json``.

Past a limit the input is refused (``InputError``, exit 2, naming the file and field;
for a live source ``LiveSourceError``, exit 3) before it can cost memory or time: a
4 GiB gzip bomb, an endless chunked body, a 700-byte YAML alias bomb, a million layers.

The limits are far above anything real (a SGLang ``/server_info`` is tens of KiB, a
``--config`` YAML a few KiB, a model ``config.json`` under 100 KiB, the largest models
have ~130 layers and 128 attention heads).
"""

from __future__ import annotations

import os
import re as _re
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError

# Files kvcheck reads whole (configs, command lines, env files, snapshots, config.json).
MAX_FILE_BYTES = 16 * 1024 * 1024
# HTTP bodies from live sources: raw bytes on the wire, and after gzip/deflate.
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_INFLATED_BYTES = 16 * 1024 * 1024
# Nesting of JSON/YAML containers (SGLang's server info nests 3-4 levels).
MAX_DEPTH = 64
# YAML: alias expansions and nodes per document (a real --config has tens of nodes).
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 100_000
# explain: characters kept of one log line (runtime messages are a few hundred).
MAX_LOG_LINE = 8192
# Characters of one message line kvcheck prints about an input (a 10 MB model-path).
MAX_MESSAGE_LINE = 300
MAX_MESSAGE_WORD = 160


def file_size_ok(path: Path, *, limit: int = MAX_FILE_BYTES) -> None:
    """Refuse a file larger than ``limit`` bytes before reading it.

    Raises ``InputError`` (exit 2) naming the file. Missing files and non-regular files
    (a FIFO, ``/dev/stdin``) are left to the reader (which reads at most ``limit + 1``).
    """
    try:
        st = os.stat(path)
    except OSError:
        return
    import stat

    if stat.S_ISREG(st.st_mode) and st.st_size > limit:
        raise InputError(
            f"file is {st.st_size} bytes; kvcheck reads files up to {limit} bytes (is this the right file?)",
            source=str(path),
        )


def json_depth_ok(obj: Any, *, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` (parsed JSON/YAML) nests at most ``limit`` containers deep.
    Iterative: safe on any depth."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, (list, tuple)):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in node)
    return True


def clip(value: Any, limit: int = MAX_MESSAGE_WORD) -> str:
    """``str(value)`` cut to ``limit`` characters with an ellipsis and the full length."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}…({len(text)} chars)"


def clip_line(line: str, *, word: int = MAX_MESSAGE_WORD, total: int = MAX_MESSAGE_LINE) -> str:
    """A message line with every run of non-space characters longer than ``word`` cut
    (a huge path or value), then the line itself cut past ``total`` characters with
    an ellipsis. Lines of ordinary length are returned unchanged."""
    if len(line) <= total:
        return line
    import re

    line = re.sub(rf"\S{{{word + 1},}}", lambda m: clip(m.group(0), word), line)
    if len(line) > total * 4:  # a message of many words: keep its start
        line = line[: total * 4 - 1] + "…"
    return line


# --------------------------------------------------------------------------------------
# Terminal safety: input-derived text made inert before it reaches a terminal
# --------------------------------------------------------------------------------------


# C0 controls but tab and newline, DEL, C1 controls (0x80-0x9f: 8-bit CSI/OSC), the
# Unicode bidi embeddings/overrides/isolates and marks (Trojan Source), line/paragraph
# separators, and the zero-width characters that hide text.
_UNSAFE = _re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
# The only escape sequences kvcheck's own renderer (rich) writes to a terminal: SGR
# colour/style (``ESC [ ... m``). Anything else is an input's, and is shown escaped.
_SGR = _re.compile("\x1b\\[[0-9;]{0,32}m")


def _escape_char(m: _re.Match[str]) -> str:
    c = m.group(0)
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def escape_terminal(text: str) -> str:
    """``text`` with every control character, escape (ESC/CSI/OSC, terminated or not),
    C1 control and bidi/zero-width character written as a visible ``\\xNN``/``\\uNNNN``:
    a value from an input cannot clear the screen, retitle the window, hide the verdict
    or reorder what is shown. Tabs and newlines are kept."""
    if not isinstance(text, str) or not text:
        return text
    return _UNSAFE.sub(_escape_char, text)


def escape_stream(text: str) -> str:
    """``escape_terminal`` for a whole output stream, keeping only the SGR sequences
    kvcheck's own renderer writes (values were escaped before rendering)."""
    if not isinstance(text, str) or not text or not _UNSAFE.search(text):
        return text
    if "\x1b" not in text:
        return _UNSAFE.sub(_escape_char, text)
    out, last = [], 0
    for m in _SGR.finditer(text):
        out.append(_UNSAFE.sub(_escape_char, text[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_UNSAFE.sub(_escape_char, text[last:]))
    return "".join(out)


def escape_values(obj: Any) -> Any:
    """``obj`` (a JSON-shaped report: dicts, lists, strings...) with ``escape_terminal``
    applied to every string, keys included: JSON encodes a control character as
    ``\\u001b``, which a reader (``jq -r``, a CI log viewer) turns back into the escape
    itself; escaped, a log's OSC 52 clipboard write or bidi override reaches it as the
    visible text ``\\x1b]52;...``. Iterative; containers are copied, nothing else."""
    if isinstance(obj, str):
        return escape_terminal(obj)
    if not isinstance(obj, (dict, list, tuple)):
        return obj
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(obj, root, 0)]
    while stack:
        node, parent, key = stack.pop()
        if isinstance(node, dict):
            out: Any = {}
            parent[key] = out
            for k, v in node.items():
                k2 = escape_terminal(k) if isinstance(k, str) else k
                stack.append((v, out, k2))
        elif isinstance(node, (list, tuple)):
            out = [None] * len(node)
            parent[key] = out
            stack.extend((v, out, i) for i, v in enumerate(node))
        else:
            parent[key] = escape_terminal(node) if isinstance(node, str) else node
    return root[0]


# --------------------------------------------------------------------------------------
# Strict JSON (live answers, snapshots)
# --------------------------------------------------------------------------------------


class StrictJSONError(ValueError):
    """JSON that parses in Python's lenient mode but is not JSON (RFC 8259): NaN,
    Infinity, a number out of a double's range, a duplicate key, a lone surrogate."""


def strict_json_loads(text: str) -> Any:
    """``json.loads`` that refuses ``NaN``/``Infinity``/``-Infinity``, numbers a double
    cannot hold (``1e400``) and integers past 4300 digits, duplicate keys in an object,
    and strings holding a lone surrogate (``"\\ud800"``); nesting past ``MAX_DEPTH`` is
    refused too. Raises ``StrictJSONError`` (or ``json.JSONDecodeError``)."""
    import json
    import math

    def constant(name: str) -> Any:
        raise StrictJSONError(f"{name} is not JSON")

    def number(raw: str) -> float:
        value = float(raw)
        if not math.isfinite(value):
            raise StrictJSONError(f"the number {clip(raw, 40)} is out of range")
        return value

    def integer(raw: str) -> int:
        if len(raw) > 4300:
            raise StrictJSONError(f"an integer of {len(raw)} digits")
        return int(raw)

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise StrictJSONError(f"the key {clip(repr(escape_terminal(k)), 60)} appears twice in one object")
            out[k] = v
        return out

    try:
        data = json.loads(text, parse_constant=constant, parse_float=number, parse_int=integer, object_pairs_hook=pairs)
    except RecursionError:
        raise StrictJSONError(f"nested deeper than {MAX_DEPTH} levels") from None
    if not json_depth_ok(data):
        raise StrictJSONError(f"nested deeper than {MAX_DEPTH} levels")
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            _no_surrogate(node)
        elif isinstance(node, dict):
            for k, v in node.items():
                _no_surrogate(k)
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
    return data


def _no_surrogate(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise StrictJSONError("a string holds a lone surrogate (\\ud800-\\udfff), not Unicode text") from None


# --------------------------------------------------------------------------------------
# Fan-out caps: how far one deployment file may expand (checked before expanding)
# --------------------------------------------------------------------------------------

# name -> (default, the preflight flag that raises it, what is counted). The defaults are
# far above published deployments (the largest handed ones have tens of workers and
# nodes, a few dozen sweep variants) and far below what costs time: each instance is
# read and classed, each variant is a whole deployment.
CAPS: dict[str, tuple[int, str, str]] = {
    "instances": (4096, "--max-instances", "server instances"),
    "replicas": (4096, "--max-instances", "replicas of one instance"),
    "nodes": (4096, "--max-nodes", "nodes"),
    "variants": (256, "--max-variants", "variants (sweep combinations and overrides)"),
    "containers": (2048, "--max-containers", "SGLang containers or launch lines"),
    "classes": (64, "--max-classes", "instance classes"),
}
_CAP_VALUES: dict[str, int] = {k: v[0] for k, v in CAPS.items()}


def set_caps(
    *,
    instances: int | None = None,
    nodes: int | None = None,
    variants: int | None = None,
    containers: int | None = None,
    classes: int | None = None,
) -> None:
    """Set the fan-out caps from kvcheck's command line (None: the default). A cap must
    be a positive integer (``InputError`` naming the flag otherwise)."""
    given = {"instances": instances, "nodes": nodes, "variants": variants, "containers": containers, "classes": classes}
    for name, value in given.items():
        if value is None:
            _CAP_VALUES[name] = CAPS[name][0]
            if name == "instances":
                _CAP_VALUES["replicas"] = CAPS["replicas"][0]
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{value!r} is not a positive whole number", field=CAPS[name][1])
        _CAP_VALUES[name] = value
        if name == "instances":
            _CAP_VALUES["replicas"] = value


def cap(name: str) -> int:
    """The current value of the fan-out cap ``name`` (a key of ``CAPS``)."""
    return _CAP_VALUES[name]


def check_cap(name: str, value: Any, *, field: str, source: str | None = None, line: int | None = None) -> None:
    """Refuse ``value`` (a count read from the input, before anything is expanded) past
    the cap ``name``: ``InputError`` (exit 2) naming the field, the cap and the flag."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= _CAP_VALUES[name]:
        return
    _default, flag, what = CAPS[name]
    at = f"line {line}: " if line else ""
    raise InputError(
        f"{at}{clip(value, 40)} {what}, over kvcheck's cap of {_CAP_VALUES[name]}; pass {flag} N to raise it",
        source=source,
        field=field,
    )


# --------------------------------------------------------------------------------------
# YAML with limits
# --------------------------------------------------------------------------------------

MAX_YAML_BYTES = 1024 * 1024


class YamlLimitError(ValueError):
    """A YAML document past ``MAX_YAML_ALIASES``, ``MAX_YAML_NODES`` (counting every
    alias as the nodes it stands for) or ``MAX_DEPTH``."""


def load_yaml_limited(text: str) -> Any:
    """``yaml.safe_load(text)`` that refuses alias bombs and deep nesting quickly and
    in little memory: composes the node graph with PyYAML's pure-Python ``SafeLoader``
    (aliases stay references), counting aliases and nesting as it goes, then counts the
    nodes the document stands for with every alias expanded (memoized per node: linear
    in the graph), and only then constructs Python objects.

    Raises ``YamlLimitError`` past a limit, ``yaml.YAMLError`` for bad syntax.
    """
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise YamlLimitError(f"{len(text)} characters of YAML; kvcheck reads up to {MAX_YAML_BYTES}")

    class _Loader(yaml.SafeLoader):
        aliases = 0
        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise YamlLimitError(
                        f"more than {MAX_YAML_ALIASES} YAML aliases (*name); a server config needs none"
                    )
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise YamlLimitError(f"YAML nested deeper than {MAX_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(root: Any) -> int:
    """Nodes ``root`` stands for with aliases expanded; ``YamlLimitError`` past
    ``MAX_YAML_NODES``. Iterative, memoized by node identity."""
    import yaml

    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes and not done:
            continue
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 1) for c in children)
        if total > MAX_YAML_NODES:
            raise YamlLimitError(
                f"the YAML stands for more than {MAX_YAML_NODES} values once its aliases are expanded (an alias bomb?)"
            )
        sizes[key] = total
    return sizes[id(root)]


# --------------------------------------------------------------------------------------
# config.json value ranges
# --------------------------------------------------------------------------------------

# (minimum, maximum) per config.json field kvcheck derives the KV geometry from. The
# maxima are several times the largest released models' values (Llama 3.1 405B: 126
# layers, 128 heads, 16384 hidden; DeepSeek V3: 61 layers, kv_lora_rank 512,
# qk_rope_head_dim 64, v_head_dim 128; Qwen3: head_dim 128; Gemma: head_dim 256).
MODEL_FIELD_RANGES: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 1024),
    "num_nextn_predict_layers": (0, 64),
    "num_attention_heads": (1, 4096),
    "num_key_value_heads": (1, 4096),
    "head_dim": (1, 4096),
    "v_head_dim": (1, 4096),
    "qk_rope_head_dim": (1, 4096),
    "qk_nope_head_dim": (1, 4096),
    "kv_lora_rank": (1, 65536),
    "hidden_size": (1, 262144),
    "index_head_dim": (1, 4096),
    "index_n_heads": (1, 4096),
    "index_topk": (1, 1 << 24),
    "index_kpool": (1, 1024),
}
# torch dtype names a config.json's ``torch_dtype``/``dtype`` can carry (transformers
# turns the string into ``getattr(torch, name)``; SGLang's ``_get_and_verify_dtype``
# then maps float32 to bfloat16 for serving).
MODEL_DTYPES = frozenset(
    {
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "half",
        "float",
        "double",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "int8",
        "uint8",
        "auto",
    }
)


def check_model_config(cfg: dict[str, Any], source: str) -> None:
    """Refuse a ``config.json`` (text config, already merged) whose geometry fields lie
    outside ``MODEL_FIELD_RANGES`` or whose dtype is not a torch dtype name.

    Only fields that are present and not ``null`` are checked (which ones a model needs
    is ``kvcheck.sglang.model``'s business). Raises ``InputError`` (exit 2) naming the
    file and the field, with the accepted range.
    """
    for key, (lo, hi) in MODEL_FIELD_RANGES.items():
        if key not in cfg or cfg[key] is None:
            continue
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InputError(
                f"config.json field {key!r} is {clip(repr(value))}; a model has an integer between {lo} and {hi} there",
                source=source,
                field=key,
            )
    for key in ("torch_dtype", "dtype"):
        value = cfg.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or value.removeprefix("torch.") not in MODEL_DTYPES:
            raise InputError(
                f"config.json field {key!r} is {clip(repr(value))}, not a torch dtype name "
                f"({', '.join(sorted(MODEL_DTYPES))})",
                source=source,
                field=key,
            )


__all__ = [
    "StrictJSONError",
    "escape_stream",
    "escape_terminal",
    "escape_values",
    "strict_json_loads",
    "CAPS",
    "cap",
    "check_cap",
    "set_caps",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INFLATED_BYTES",
    "MAX_LOG_LINE",
    "MAX_MESSAGE_LINE",
    "MODEL_DTYPES",
    "MODEL_FIELD_RANGES",
    "check_model_config",
    "clip",
    "clip_line",
    "file_size_ok",
    "json_depth_ok",
]


def spec_hint(spec: str) -> str:
    """What to add to "file not found" for a ``--prefill``/``--decode`` value: the server's
    arguments pasted in place of a file (``--prefill "python -m sglang.launch_server
    ..."``: the option takes a file holding them), or an address that is no URL."""
    words = spec.split()
    if len(words) > 1 and any(w.startswith("--") for w in words):
        return (
            " (--prefill/--decode take a file, not the arguments: write the launch line into a file, e.g. "
            "prefill.sh, and pass its path; a --config YAML, JSON args or a live server http://HOST:PORT also work)"
        )
    return " (a live server is http://HOST:PORT)" if "://" in spec or ":" in spec else ""
