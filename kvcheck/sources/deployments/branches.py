"""Shell ``if`` / ``case`` blocks in launch scripts: each branch read as the script runs it.

Published scripts pick the role, or a flag, by a condition kvcheck cannot evaluate::

    if [ "$ROLE" = prefill ]; then MODE=prefill; else MODE=decode; fi
    python -m sglang.launch_server --disaggregation-mode $MODE ...

    case "$1" in
      prefill) python -m sglang.launch_server --disaggregation-mode prefill ... ;;
      decode)  python -m sglang.launch_server --disaggregation-mode decode ... ;;
    esac

Read straight through, the last assignment wins and a prefill reads as a decode. Instead,
the script is read once per combination of branches (``BranchChoice``): ``branch_filter``
passes on the statements of the chosen branch of each construct and drops the others,
while the shell reader keeps its variables as the shell would on that path. The
script reader (``kvcheck.sources.deployments.scripts``) then puts the readings together:
readings whose instances take different roles are one deployment run once per node
with a different condition (each branch the role it launches); readings that each hold
the same roles are alternative deployments (``Deployment.variant`` names the branches).

The constructs, as bash parses them (``man bash``, Compound Commands):

* ``if LIST; then LIST; [elif LIST; then LIST;]... [else LIST;] fi``: one alternative per
  ``then``/``else`` body, plus "none taken" when there is no ``else``; conditions are
  never run (they are tests kvcheck cannot decide);
* ``case WORD in [PATTERN[|PATTERN]...) LIST ;;]... esac``: one alternative per pattern
  list, plus "none matched" when no pattern is ``*``. A ``case`` on a positional
  parameter (``$1``) inside a ``while``/``until``/``for`` loop is argument parsing: the
  published script runs without arguments, so none of its branches is taken and its
  defaults stand;
* ``while``/``until``/``for ... do LIST done``: the body is read once; the condition not;
* ``exit`` as a statement of a taken branch ends that reading (a usage branch launches
  nothing after it); after ``&&``/``||`` it is conditional and ignored.

A condition never decides a role: either every branch is read, or none is taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kvcheck.sources.deployments.shell import Word

# at most this many readings of one script (branch combinations); past it, the rest is
# reported as unchecked (``conditional-branches``)
MAX_READINGS = 64
_POSITIONAL = ("$1", "$2", "$3", "$@", "$*", "${1}", "${@}")


@dataclass
class _Frame:
    kind: str  # "if", "case", "loop"
    cid: tuple[int | None, str] = (None, "")
    chosen: int = 0
    branch: int = -1  # index of the body being read (-1: condition / before the first pattern)
    state: str = "cond"  # "cond" (if/loop condition), "pattern", "body"
    has_default: bool = False  # if: an else; case: a * pattern
    arg_parsing: bool = False
    labels: list[str] = field(default_factory=list)
    active_outside: bool = True  # every enclosing frame is on its chosen path


@dataclass
class BranchChoice:
    """Which alternative of each construct (keyed by (line, kind)) one reading takes;
    ``seen``: the constructs met on this reading's path -> their alternatives' labels
    (the last label is the "none taken" alternative when there is one)."""

    chosen: dict[tuple, int] = field(default_factory=dict)
    seen: dict[tuple, list[str]] = field(default_factory=dict)
    exited: bool = False

    def label(self, only: set | None = None) -> str:
        """The branches taken, e.g. ``if at line 3: else``; ``only``: just these constructs."""
        parts = []
        for cid, labels in sorted(self.seen.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
            if only is not None and cid not in only:
                continue
            k = self.chosen.get(cid, 0)
            if labels and k < len(labels):
                parts.append(f"{cid[1]} at line {cid[0]}: {labels[k]}")
        return "; ".join(parts)


def _active(stack: list[_Frame]) -> bool:
    if not stack:
        return True
    f = stack[-1]
    if not f.active_outside:
        return False
    if f.kind == "loop":
        return f.state == "body"
    return f.state == "body" and f.branch == f.chosen


def _text(words: list[Word]) -> list[str]:
    return [w.text for w in words]


def branch_filter(statements, choice: BranchChoice) -> Iterator[tuple[list[Word], str]]:
    """``(words, terminator)`` statements of the reading ``choice`` takes: keywords
    stripped, the statements of other branches (and all conditions) dropped."""
    stack: list[_Frame] = []
    prev_term = "\n"
    for words, term in statements:
        texts = _text(words)
        # strip leading keywords, one by one, opening/closing frames
        while texts:
            head = texts[0]
            top = stack[-1] if stack else None
            if head in ("if", "while", "until", "for") and (top is None or top.kind != "case" or top.state == "body"):
                outside = _active(stack)
                if head == "if":
                    cid = (words[0].line, "if")
                    f = _Frame("if", cid, chosen=choice.chosen.get(cid, 0), active_outside=outside, labels=["then"])
                    if outside:
                        choice.seen.setdefault(cid, ["then"])
                else:
                    f = _Frame("loop", active_outside=outside)
                stack.append(f)
                words, texts = [], []  # the condition (or loop header) is never run
                break
            if head == "case" and (top is None or top.kind != "case" or top.state == "body"):
                outside = _active(stack)
                cid = (words[0].line, "case")
                subject = texts[1] if len(texts) > 1 else ""
                in_loop = any(fr.kind == "loop" for fr in stack)
                f = _Frame(
                    "case",
                    cid,
                    state="pattern",
                    active_outside=outside,
                    arg_parsing=in_loop
                    and (
                        subject in _POSITIONAL
                        or any(u in ("1", "@", "*") for u in (words[1].unresolved if len(words) > 1 else []))
                    ),
                )
                f.chosen = -1 if f.arg_parsing else choice.chosen.get(cid, 0)
                stack.append(f)
                rest = words[texts.index("in") + 1 :] if "in" in texts else []
                words, texts = rest, _text(rest)
                if outside and not f.arg_parsing:
                    choice.seen.setdefault(cid, [])
                continue
            if top is not None and top.kind == "if" and head in ("then", "elif", "else", "fi"):
                if head == "then":
                    top.state, top.branch = "body", top.branch + 1
                elif head == "elif":
                    top.state = "cond"
                    words, texts = [], []
                    break
                elif head == "else":
                    top.state, top.branch, top.has_default = "body", top.branch + 1, True
                    top.labels.append("else")
                else:  # fi
                    _close_if(top, choice)
                    stack.pop()
                words, texts = words[1:], texts[1:]
                continue
            if top is not None and top.kind == "if" and top.state == "body" and head == "then":
                words, texts = words[1:], texts[1:]
                continue
            if top is not None and top.kind == "loop" and head in ("do", "done"):
                if head == "do":
                    top.state = "body"
                else:
                    stack.pop()
                words, texts = words[1:], texts[1:]
                continue
            if top is not None and top.kind == "case" and head == "esac":
                _close_case(top, choice)
                stack.pop()
                words, texts = words[1:], texts[1:]
                continue
            if top is not None and top.kind == "case" and top.state == "pattern":
                # PATTERN[|PATTERN]...) : the words up to ")" name the branch
                if term in (")", "|"):
                    if not top.labels or top.labels[-1].endswith("|"):
                        top.labels[-1:] = [(top.labels[-1] if top.labels else "") + "".join(texts)]
                    else:
                        top.labels.append("".join(texts))
                    if "*" in texts or '"*"' in texts:
                        top.has_default = True
                    if term == "|":
                        top.labels[-1] += "|"
                    else:
                        top.state, top.branch = "body", top.branch + 1
                words, texts = [], []
                break
            break
        if stack and stack[-1].kind == "if" and stack[-1].state == "cond":
            words = []
        if stack and stack[-1].kind == "loop" and stack[-1].state == "cond":
            words = []
        top = stack[-1] if stack else None
        if top is not None and top.kind == "case" and not words and term == ";;":
            top.state = "pattern"
            prev_term = term
            continue
        if top is not None and top.kind == "case" and top.state == "pattern" and term in (")", "|"):
            prev_term = term
            continue
        if words and _active(stack):
            if (
                words[0].text == "exit"
                and any(fr.kind in ("if", "case") for fr in stack)
                and prev_term not in ("&&", "||")
            ):
                choice.exited = True
                _exit_in(stack, choice)
                return
            yield words, term
        elif not words and term in ("{", "}") and _active(stack):
            yield words, term
        if top is not None and top.kind == "case" and term == ";;":
            top.state = "pattern"
        prev_term = term


def _exit_in(stack: list[_Frame], choice: BranchChoice) -> None:
    """An ``exit`` in a taken branch ends the reading before the constructs around it close:
    each still has an alternative after the branches read so far (the rest of an ``if``, a
    later ``case`` pattern, none taken), so the guard ``if [ -z "$X" ]; then exit 1; fi`` is
    also read with its branch not taken, where the servers after it start."""
    for f in stack:
        if f.kind not in ("if", "case") or not f.active_outside or (f.kind == "case" and f.arg_parsing):
            continue
        if f.kind == "if":
            known = ["then" if i == 0 else "elif" for i in range(max(f.branch, 0) + 1)]
        else:
            known = [f"{lab.rstrip('|')})" for lab in f.labels] or ["*)"]
        if len(choice.seen.get(f.cid, [])) <= len(known):
            choice.seen[f.cid] = [*known, "not taken"]


def _close_if(f: _Frame, choice: BranchChoice) -> None:
    labels = ["then" if i == 0 else "elif" for i in range(f.branch + 1 - (1 if f.has_default else 0))]
    if f.has_default:
        labels.append("else")
    else:
        labels.append("none taken")
    if f.active_outside:
        choice.seen[f.cid] = labels


def _close_case(f: _Frame, choice: BranchChoice) -> None:
    if f.arg_parsing:
        return
    labels = [f"{lab.rstrip('|')})" for lab in f.labels]
    if not f.has_default:
        labels.append("none matched")
    if f.active_outside:
        choice.seen[f.cid] = labels
