"""The one rule for quoting input text in a message (SECURITY.md, promise 3).

An input file may be anything: a fork's pull request can name ``/etc/shadow`` as a
``--config`` or a ``source`` target, and a user can hand ``/etc/passwd`` to ``--prefill``.
A message about input kvcheck could not take (a YAML syntax error, a line that is no
launch command, a key SGLang's parser refuses, a variable or command substitution with no
value) names the file, line and column and the kind of problem. It quotes a piece of the
input only when that piece has the shape of a server-arg name or value: short, and made of
``[A-Za-z0-9_.-]`` (``--page-sise``, ``tp_size``, ``prefil``, ``1.5``). Anything else is
shown as ``NOT_SHOWN``. A shadow or passwd line (``root:x:0:0:...``), a path, a command
(``$(cat /etc/passwd)``) or a sentence never has that shape.

Secrets are a separate matter (``kvcheck.sources.redact``): a token of the right shape
that is a secret (``--api-key``'s value) is still scrubbed from every output.
"""

from __future__ import annotations

import re

NOT_SHOWN = "(not shown)"

# a server-arg name or value: an optional - or --, then at most 64 characters of
# letters, digits, _ . - (no spaces, colons, slashes, quotes, $ or shell operators)
_SHAPE = re.compile(r"-{0,2}[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def has_arg_shape(text: object) -> bool:
    """Whether ``text`` is a string with the shape of a server-arg name or value."""
    return isinstance(text, str) and _SHAPE.fullmatch(text) is not None


def shown(text: object) -> str:
    """``text`` when it has the shape of a server-arg name or value, else ``NOT_SHOWN``."""
    return text if has_arg_shape(text) else NOT_SHOWN  # type: ignore[return-value]


def quoted(text: object) -> str:
    """``'text'`` (Python's repr, as argparse and kvcheck quote a token) when it has the
    shape, else ``NOT_SHOWN``."""
    return repr(text) if has_arg_shape(text) else NOT_SHOWN


def shown_tokens(tokens: list[str] | tuple[str, ...]) -> str:
    """The tokens joined by spaces, each ``shown``; runs of tokens not shown are one
    ``NOT_SHOWN``."""
    out: list[str] = []
    for t in tokens:
        s = shown(t)
        if s == NOT_SHOWN and out and out[-1] == NOT_SHOWN:
            continue
        out.append(s)
    return " ".join(out)


INNER_VALUE = "<value from --config>"
_QUOTE = re.compile(r"'((?:[^'\\]|\\.){0,4096})'")
_UNRECOGNIZED = "unrecognized arguments: "


def argparse_shown(message: str, hidden: frozenset[str] | set[str] = frozenset()) -> str:
    """An argparse refusal (``unrecognized arguments: ...``, ``argument --x: invalid int
    value: 'v'``, ``ambiguous option: --x could match ...``) as kvcheck shows it: the
    runtime's own words, each token of the input it quotes under ``shown``'s rule, and a
    value in ``hidden`` (read from a file named inside the input: a launch line's
    ``--config``) as ``INNER_VALUE`` whatever its shape (SECURITY.md, promise 3). The
    names kvcheck's flag table adds (``did you mean --x?``, ``choose from ...``) are
    the table's own and stay."""

    def one(tok: str) -> str:
        if tok in hidden:
            return INNER_VALUE
        return shown(tok)

    head, sep, tail = message.partition(_UNRECOGNIZED)
    if sep:
        listed, hint_sep, hint = tail.partition("; did you mean ")
        out: list[str] = []
        for t in listed.split(" "):
            s = one(t)
            if s in (NOT_SHOWN, INNER_VALUE) and out and out[-1] in (NOT_SHOWN, INNER_VALUE):
                out[-1] = NOT_SHOWN if NOT_SHOWN in (s, out[-1]) else INNER_VALUE
                continue
            out.append(s)
        return head + sep + " ".join(out) + hint_sep + hint
    if " could match " in message:
        lead, _, matches = message.partition(" could match ")
        before, _, tok = lead.rpartition(" ")
        return f"{before} {one(tok)} could match {matches}"
    return _QUOTE.sub(lambda m: INNER_VALUE if m.group(1) in hidden else quoted(m.group(1)), message)


COMMAND_SUBSTITUTION = "$(...)"
# how a file refers to a value filled in elsewhere: $NAME, ${NAME}, ${NAME:-default},
# $(NAME) (Kubernetes), <NAME>, {{ .Values.name }}; names and defaults of arg shape only
_REFERENCE = re.compile(
    r"\$[A-Za-z_][A-Za-z0-9_]{0,63}"
    r"|\$\{[A-Za-z_][A-Za-z0-9_]{0,63}(?::?[-=+?][A-Za-z0-9_.-]{0,64})?\}"
    r"|\$\([A-Za-z_][A-Za-z0-9_]{0,63}\)"
    r"|<[A-Za-z_][A-Za-z0-9_.-]{0,63}>"
    r"|\{\{-?\s*\.?[A-Za-z_][A-Za-z0-9_.]{0,127}\s*-?\}\}"
)


def is_command_substitution(reference: str) -> bool:
    """``$(cat x)`` or a backtick command: its value is a command's output, which kvcheck
    never runs (SECURITY.md, promise 1)."""
    return reference.startswith("`") or (reference.startswith("$(") and not _REFERENCE.fullmatch(reference))


def reference_shown(reference: str) -> str:
    """A reference to a value filled in elsewhere, as a message shows it: as written when
    it has a reference's shape (``${TP:-4}``, ``$(MODEL_ID)``, ``<NODE_RANK>``), a
    command substitution as ``COMMAND_SUBSTITUTION``, anything else ``NOT_SHOWN``."""
    if is_command_substitution(reference):
        return COMMAND_SUBSTITUTION
    if _REFERENCE.fullmatch(reference) or has_arg_shape(reference):
        return reference
    return NOT_SHOWN
