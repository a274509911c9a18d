"""One example input per check (issue 15; as ruff documents each rule with an example).

Each example is a small deployment that makes kvcheck emit a check's id today: a launch-line
script, a Kubernetes manifest, a pair of ``--config`` YAMLs, a snapshot... The file
``<id>.<ext>`` in this directory is named by the check (or finding) id it is for; companion
files, when it needs several, sit in the directory ``<id>/`` beside it. The file starts with
a header of ``#`` comment lines:

    # example: FIRES SEVERITY
    # also: ID SEVERITY, ID SEVERITY            (optional: other ids it makes kvcheck emit)
    # run: kvcheck preflight -f ID.sh --sglang-version 0.5.23
    # proved-by: tests/test_x.py::test_y      (only where the id needs a live peer; "none"
    #                                          where no test makes it fire yet)
    # what the example shows, and the runtime rule it restates

``FIRES`` is the finding id kvcheck emits (the check's own id, or one of the finding ids the
check emits, ``kvcheck.checks.ids.FINDING_IDS``) at ``SEVERITY``; ``also`` names other ids
the same input makes kvcheck emit (each is checked too). The ``run`` line is the
command, run in this directory. An id that fires only against a live server, a NIXL agent,
the probe or a fabric of nodes names instead the real test that makes it fire
(``proved-by``: the test drives the real peer on loopback); its ``run`` line shows the
command a user would type. ``tests/test_check_examples.py`` runs every example and checks
every registered check has one.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent
SUFFIXES = (".sh", ".yaml", ".md", ".txt")
SHOWN_LINES = 30  # a companion file longer than this is named in `kvcheck checks ID`, not shown


@dataclass(frozen=True)
class Example:
    """One example: ``id`` (the file's stem), ``fires`` (the finding id it makes kvcheck
    emit) at ``severity``, ``command`` (the argv after ``kvcheck``, paths relative to
    ``EXAMPLES_DIR``), ``proved_by`` (``tests/FILE.py::TEST`` for live-only ids, else
    None), ``note`` (the header's free text), ``path`` and ``body`` (the file without its
    header)."""

    id: str
    fires: str
    severity: str
    command: tuple[str, ...]
    proved_by: str | None
    note: str
    path: Path
    body: str
    also: tuple[tuple[str, str], ...] = ()

    @property
    def live(self) -> bool:
        """Whether the example needs a live peer (a ``proved-by`` line): it is not run here."""
        return self.proved_by is not None

    @property
    def companions(self) -> list[Path]:
        """The other files the example reads: those its ``run`` line names in this directory,
        then those in ``<id>/`` (each once, in that order)."""
        named = [EXAMPLES_DIR / a for a in self.command if not a.startswith("-") and (EXAMPLES_DIR / a).is_file()]
        d = self.path.with_suffix("")
        own = sorted(p for p in d.rglob("*") if p.is_file()) if d.is_dir() else []
        return [p for p in dict.fromkeys(named + own) if p != self.path and p.resolve().is_relative_to(EXAMPLES_DIR)]


def parse_example(path: Path) -> Example:
    """The example in ``path``; ``ValueError`` naming the file when its header is malformed
    (no ``example:`` or ``run:`` line, an ``example:`` line without an id and a severity)."""
    lines = path.read_text("utf-8").splitlines()
    fields: dict[str, str] = {}
    note: list[str] = []
    n = 0
    for n, line in enumerate(lines):  # noqa: B007  (n: the first line after the header)
        if line.startswith("#!"):
            continue
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        key, sep, value = text.partition(":")
        if sep and key in ("example", "also", "run", "proved-by"):
            fields[key] = value.strip()
        elif text:
            note.append(text)
    else:
        n = len(lines)
    head = fields.get("example", "").split()
    also = [a.split() for a in fields.get("also", "").split(",") if a.strip()]
    if len(head) != 2 or "run" not in fields or any(len(a) != 2 for a in also):
        raise ValueError(
            f"{path}: the header needs '# example: ID SEVERITY' and '# run: kvcheck ...' "
            "(and '# also: ID SEVERITY, ...')"
        )
    argv = shlex.split(fields["run"])
    if argv[:1] != ["kvcheck"]:
        raise ValueError(f"{path}: the run line starts with 'kvcheck'")
    return Example(
        id=path.stem,
        fires=head[0],
        severity=head[1],
        command=tuple(argv[1:]),
        proved_by=fields.get("proved-by"),
        note=" ".join(note),
        path=path,
        body="\n".join(lines[n:]).strip("\n"),
        also=tuple((a[0], a[1]) for a in also),
    )


@functools.lru_cache(maxsize=1)
def load_examples() -> dict[str, Example]:
    """Every example in ``EXAMPLES_DIR``, by id."""
    out = {}
    for path in sorted(EXAMPLES_DIR.iterdir()):
        if path.is_file() and path.suffix in SUFFIXES:
            out[path.stem] = parse_example(path)
    return out


def example_for(check_id: str) -> Example | None:
    """The example for ``check_id``: its own file, else one that makes kvcheck emit it (its
    ``also`` line), else (a check) one that fires one of the check's finding ids, else (a
    finding id) its check's example."""
    from kvcheck.checks.ids import check_of

    examples = load_examples()
    if check_id in examples:
        return examples[check_id]
    for ex in examples.values():
        if any(fid == check_id for fid, _ in ex.also):
            return ex
    for ex in examples.values():
        if check_of(ex.fires) == check_id:
            return ex
    owner = check_of(check_id)
    return examples.get(owner) if owner != check_id else None


def example_severity(finding_id: str) -> str | None:
    """The severity an example makes kvcheck emit ``finding_id`` at (its ``example:`` or
    ``also:`` line), None when no example emits it."""
    for ex in load_examples().values():
        if ex.fires == finding_id:
            return ex.severity
        for fid, sev in ex.also:
            if fid == finding_id:
                return sev
    return None


def example_lines(check_id: str, max_lines: int = SHOWN_LINES) -> list[str]:
    """``kvcheck checks ID``'s example block: what the example shows, the command and
    where to run it, the id it fires, and its files (the header file without its header;
    a companion file of more than ``max_lines`` lines is named, not shown). Empty when
    ``check_id`` has no example."""
    ex = example_for(check_id)
    if ex is None:
        return []
    out = [f"  example: {ex.note}" if ex.note else "  example:"]
    out.append(f"    $ cd {EXAMPLES_DIR}")
    out.append(f"    $ kvcheck {shlex.join(ex.command)}")
    fires = f"    fires: {ex.fires} [{ex.severity}]" + "".join(f", {fid} [{sev}]" for fid, sev in ex.also)
    if ex.live:
        proof = ex.proved_by if ex.proved_by != "none" else "no test proves it yet"
        fires += f" (needs live peers; {proof})"
    out.append(fires)
    for path in [ex.path, *ex.companions]:
        body = ex.body if path == ex.path else path.read_text("utf-8").strip("\n")
        if not body:
            continue
        name = path.relative_to(EXAMPLES_DIR)
        lines = body.splitlines()
        if path != ex.path and len(lines) > max_lines:
            out.append(f"    {name}: ({len(lines)} lines)")
            continue
        out.append(f"    {name}:")
        out += [f"      {line}" if line else "" for line in lines]
    return out
