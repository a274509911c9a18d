"""Scripts that are read together: ``source FILE`` / ``. FILE``, and helper files given with ``-f``.

* ``source FILE`` (``. FILE``): the statements of FILE run at that point, in the same
  shell, so its assignments (and functions) feed what follows, exactly as bash runs a
  sourced file. FILE is the expanded word: ``"$(dirname "$0")/00_common.sh"`` and
  ``"$SCRIPT_DIR/lib.sh"`` (``SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)``)
  are computed as text (``kvcheck.sources.deployments.variables._path_command``); a
  relative FILE is looked up beside the script. FILE is read when it is one of the ``-f``
  files, or when it lies under the read root (``--root DIR``, default the script's
  directory; ``kvcheck.sources.files.within_root``, SECURITY.md rule 2). Otherwise (a path
  inside the image, an unset variable, outside the root) it is not opened: a
  ``source-not-read`` info names it, and the variables it would set stay unresolved.
* Helper files among several ``-f`` files (a ``00_common.sh`` of variables, a router-only
  script): one deployment. A shell file with no SGLang launch line contributes its
  variable definitions to the other scripts, as if each sourced it first
  (``helper_variables``), in the order given.
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Iterator
from pathlib import Path

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Location, Problem
from kvcheck.sources.deployments.shell import Word, words_of
from kvcheck.sources.deployments.variables import Scope, VarDef

# realpaths of the -f files (set by read_deployments): a file the user named is read
GIVEN_FILES: contextvars.ContextVar[frozenset] = contextvars.ContextVar("kvcheck_given_files", default=frozenset())
# realpaths of the files read from inside others while -f files are read (a sourced
# script, a launch line's --config): a -f file among them contributes what it holds
# there (read_deployments), and is not read a second time as its own deployment
READ_INSIDE: contextvars.ContextVar[set | None] = contextvars.ContextVar("kvcheck_read_inside", default=None)


def note_read_inside(path: Path | str) -> None:
    """Record that ``path`` was read from inside another input (``READ_INSIDE``)."""
    seen = READ_INSIDE.get()
    if seen is not None:
        seen.add(_realpath(str(path)))


MAX_SOURCE_DEPTH = 8
MAX_SOURCED_BYTES = 16 * 1024 * 1024  # a script's sourced files, all reads together (scripts are 4 MiB at most)


def _realpath(p: str) -> str:
    try:
        return os.path.realpath(p)
    except (OSError, ValueError):
        return p


def _target(words: list[Word]) -> Word | None:
    if len(words) >= 2 and words[0].text in ("source", ".") and not words[0].quoted:
        return words[1]
    return None


def follow_sources(
    statements: Iterator[tuple[list[Word], str]],
    file: str,
    scope: Scope,
    problems: list[Problem],
    _stack: tuple[str, ...] = (),
    _budget: list[int] | None = None,
) -> Iterator[tuple[list[Word], str]]:
    """``statements`` with each ``source FILE`` replaced by FILE's statements (read
    lazily, so FILE sees the assignments made before it, and what follows sees FILE's).
    At most ``MAX_SOURCED_BYTES`` are read from sourced files per script."""
    budget = _budget if _budget is not None else [MAX_SOURCED_BYTES]
    for words, term in statements:
        target = _target(words)
        if target is None:
            yield words, term
            continue
        loc = Location(words[0].file or file, words[0].line)
        path = _resolve(target, file, scope)
        text, why = (
            (None, f"`source {target.text}`: {', '.join(target.unresolved)} is not known here")
            if path is None
            else _read(path, file, _stack)
        )
        if text is not None:
            budget[0] -= len(text)
            if budget[0] < 0:
                text, why = (
                    None,
                    f"`source {path}`: more than {MAX_SOURCED_BYTES // 1024 // 1024} MiB read from sourced files for "
                    "this script; not read",
                )
        if text is None:
            problems.append(
                Problem(
                    "source-not-read",
                    f"{loc}: {why}; the variables it sets stay unresolved",
                    loc,
                    "Give the sourced file with -f too (or keep it beside the script), or pass its variables with "
                    "--env FILE.",
                )
            )
            continue
        inner = str(path)
        for stmt, t in follow_sources(
            words_of(text, inner, 1, scope), inner, scope, problems, (*_stack, _realpath(file)), budget
        ):
            for w in stmt:
                w.file = w.file or inner
            yield stmt, t


def _resolve(target: Word, file: str, scope: Scope) -> Path | None:
    if target.unresolved or not target.text:
        return None
    p = Path(target.text)
    if p.is_absolute():
        return p
    beside = Path(file).parent / p
    # a path built from $0 is relative to where kvcheck runs, as the script's own $0 is
    return p if (scope.script and target.text.startswith(str(Path(scope.script).parent)) and p.exists()) else beside


def _read(path: Path, file: str, stack: tuple[str, ...]) -> tuple[str | None, str]:
    from kvcheck.sources.deployments.bounds import MAX_SCRIPT_BYTES
    from kvcheck.sources.files import read_bytes_bounded, within_root

    real = _realpath(str(path))
    if real in stack or real == _realpath(file) or len(stack) >= MAX_SOURCE_DEPTH:
        return None, f"`source {path}`: sourced again inside itself (or more than {MAX_SOURCE_DEPTH} deep); read once"
    if real not in GIVEN_FILES.get() and not within_root(path, Path(file).parent):
        # checked first: whether a file outside the root exists is never told
        return (
            None,
            f"`source {path}`: the file is outside the directory kvcheck may read (--root DIR, default the script's "
            "directory)",
        )
    if not path.is_file():
        return None, f"`source {path}`: no such file here (a file inside the image?)"
    try:
        data = read_bytes_bounded(path, limit=MAX_SCRIPT_BYTES, what="sourced script")
        text = data.decode("utf-8-sig")
        note_read_inside(path)
        return text, ""
    except (InputError, UnicodeDecodeError, OSError) as exc:
        return None, f"`source {path}`: not readable ({str(exc).splitlines()[0][:200]})"


def helper_variables(
    path: Path, text: str, env: dict[str, str] | None, prelude: dict[str, VarDef], *, use_os_environ: bool = False
) -> tuple[dict[str, VarDef], list[Problem]]:
    """The variables a helper script (no launch line) leaves set, read with the earlier
    helpers' ``prelude`` in scope: ``prelude`` updated with them, and its problems."""
    from kvcheck.sources.deployments.launch import handle_assignments
    from kvcheck.sources.deployments.shell import markdown_blocks
    from kvcheck.sources.deployments.variables import PRELUDE, SCRIPT_PATH

    file = str(path)
    problems: list[Problem] = []
    t1, t2 = PRELUDE.set(dict(prelude)), SCRIPT_PATH.set(file)
    try:
        scope = Scope.build(env=env, use_os_environ=use_os_environ)
        for first_line, block in markdown_blocks(text) or [(1, text)]:
            for words, _ in follow_sources(words_of(block, file, first_line, scope), file, scope, problems):
                handle_assignments(words, scope, file)
    finally:
        PRELUDE.reset(t1)
        SCRIPT_PATH.reset(t2)
    import dataclasses

    # what the helper exports stays exported in the scripts read after it (as if sourced)
    left = {**prelude, **scope.layers[0]}
    return {n: dataclasses.replace(d, exported=n in scope.exported) for n, d in left.items()}, problems


class NoServers(InputError):
    """A deployment file that launches no SGLang prefill/decode server or PD router.
    Alone, that is bad input (exit 2); among several ``-f`` files it is a helper that
    contributes what it has (``non_pd``: SGLang servers it starts that take no part in
    KV transfer)."""

    def __init__(self, message: str, *, source: str, non_pd: list[Location] | None = None):
        super().__init__(message, source=source)
        self.non_pd = list(non_pd or [])


def non_pd_problem(loc: Location) -> Problem:
    return Problem(
        "not-disaggregated",
        f"{loc}: an SGLang server without --disaggregation-mode prefill|decode among PD instances; it takes no part "
        "in KV transfer",
        loc,
        "add --disaggregation-mode prefill or decode if it is meant to serve PD traffic",
    )


# a shell prompt as a terminal shows it: "[user@node01 ~]$ ", "(venv) user@host:~/x$ "
_PROMPT = re.compile(r"(?m)^(?:\([^)\n]{0,80}\)\s*)?\[?[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+[^\n$#]{0,200}[$#] ")


def is_transcript(text: str) -> bool:
    """A terminal session pasted as is (prompts with user@host), not a script."""
    return bool(_PROMPT.search(text))


def drop_reruns(instances: list, text: str) -> list:
    """In a terminal transcript, the same server command typed again (same role, launcher,
    flags and environment: the same address and node rank) is a rerun of the earlier
    attempt, never another node or instance: one is kept. An attempt with other flags
    stays (it may be the one that failed). Scripts are left as they are."""
    if not is_transcript(text):
        return instances
    last: dict[tuple, int] = {}
    for k, inst in enumerate(instances):
        key = (inst.role, inst.launcher, tuple(inst.argv), tuple(sorted(inst.env.items())))
        last[key] = k
    keep = set(last.values())
    return [inst for k, inst in enumerate(instances) if k in keep]
