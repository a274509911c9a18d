"""Shell text -> statements of words, with each word's line and its unresolved variables.

A small POSIX-shell word splitter (not a shell): quotes (``'...'``, ``"..."``, ``$'...'``),
backslash escapes and line continuations, comments, the operators that end a command
(newline, ``;``, ``&&``, ``||``, ``&``, ``|``, parentheses and braces) and redirections
(``> log``, ``2>&1``, ``>> f``, ``< f``, ``&> f``), which are dropped. Variables are
expanded while words are built (outside single quotes), from a ``Scope`` that the caller
updates between statements, so ``export TP=8`` on one line feeds ``--tp ${TP}`` on the
next exactly as a shell would.

Markdown: when the text holds fenced code blocks (````` ```bash `````), only the blocks
are read, each at its own lines; a leading ``$ `` prompt is removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kvcheck.sources.deployments.instance import Location
from kvcheck.sources.deployments.variables import Scope, bracket_end, expand

# a fence, also inside a block quote (a GitHub reply quoting the post: ``> ```shell``); the
# quote markers (group ``quote``) are taken off each line of the block as Markdown does
_FENCE = re.compile(r"^(?P<quote>\s*(?:>[ \t]?)*)\s*(?P<fence>```+|~~~+)\s*(?P<lang>[A-Za-z0-9_+-]*)")


def _fenced(lines: list[str], i: int, m: re.Match) -> tuple[int, list[str]]:
    """The body lines of the fenced block opened at ``lines[i]`` (its block-quote markers taken
    off) and the index of its closing fence (``len(lines)`` when it is never closed)."""
    depth = m.group("quote").count(">")
    unquote = re.compile(r"^\s*" + r"(?:>[ \t]?)" * depth) if depth else None
    fence = m.group("fence")
    j = i + 1
    body: list[str] = []
    while j < len(lines):
        line = unquote.sub("", lines[j], count=1) if unquote else lines[j]
        if line.strip().startswith(fence[:3]):
            break
        body.append(line)
        j += 1
    return j, body


_SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh", "shell-session", "shellsession", "text", "sbatch"}


@dataclass
class Word:
    """One shell word after quote removal and variable expansion: ``text``, the 1-based
    ``line`` where it starts, ``unresolved`` variable names left in it, and ``quoted``
    (any part was quoted, so it is never an operator or an assignment by accident)."""

    text: str
    line: int
    unresolved: list[str] = field(default_factory=list)
    quoted: bool = False
    single_quoted_only: bool = False
    file: str | None = None  # set when the word comes from another file (a --config YAML)


def markdown_blocks(text: str, *, markdown: bool = False) -> list[tuple[int, str]] | None:
    """``(first line, block text)`` for each shell-like fenced block, or None when the
    text has no fences (then it is a plain script). On a Markdown page (fences, or
    ``markdown``: a ``.md`` file) where no fenced block launches a server, the inline code
    spans that launch a PD server are the blocks."""
    lines = text.splitlines()
    blocks: list[tuple[int, str]] = []
    i = 0
    found = False
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        found = True
        lang = m.group("lang").lower()
        j, body = _fenced(lines, i, m)
        if lang in _SHELL_LANGS:
            cleaned = [re.sub(r"^(\s*)\$ ", r"\1", ln) for ln in body]
            blocks.append((i + 2, "\n".join(cleaned)))
        i = j + 1
    if (found or markdown) and not any(_INLINE_LAUNCH.search(b) for _, b in blocks):
        inline = _inline_launches(lines)
        if inline:
            return blocks + inline
    return blocks if found else None


# a launch line a page gives as inline code (``Run `python -m sglang.launch_server ...
# --disaggregation-mode prefill` on the first node``), read only where no fenced block of
# the page launches a server
_INLINE_LAUNCH = re.compile(
    r"(-m\s+(sglang\.launch_server|dynamo\.sglang)|\bsglang\s+serve)\b[^\n]*--disaggregation-mode"
)
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]{20,4000})`(?!`)")


def _inline_launches(lines: list[str]) -> list[tuple[int, str]]:
    """``(line, command)`` of each inline code span outside fences that launches a PD server."""
    out: list[tuple[int, str]] = []
    in_fence = None
    for n, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if m:
            in_fence = None if in_fence and line.strip().startswith(in_fence) else (in_fence or m.group("fence")[:3])
            continue
        if in_fence:
            continue
        for span in _INLINE_CODE.finditer(line):
            code = re.sub(r"^\s*\$ ", "", span.group(1))
            if _INLINE_LAUNCH.search(code):
                out.append((n, code))
    return out


def markdown_yaml_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line, block text)`` of each ```` ```yaml ```` fenced block of a Markdown page."""
    lines = text.splitlines()
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang = m.group("lang").lower()
        j, body = _fenced(lines, i, m)
        if lang in ("yaml", "yml"):
            out.append((i + 2, "\n".join(body)))
        i = j + 1
    return out


# A value left for the reader to fill in, never shell syntax: a docs placeholder
# (``<MODEL_PATH>``, ``<node-rank>``) or a Helm / Go template action (``{{ .Values.x }}``).
PLACEHOLDER = re.compile(r"<[A-Za-z_][A-Za-z0-9_.:/-]{0,80}>")
TEMPLATE = re.compile(r"\{\{-?[^{}\n]{0,200}?-?\}\}")


_ARRAY_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=\(")
_ARRAY_USE = re.compile(r"(\"?)\$\{([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]\}\1")


def placeholders(text: str) -> list[str]:
    """The placeholders (``<NAME>``) and template actions (``{{ ... }}``) in a value."""
    return [m.group(0) for m in PLACEHOLDER.finditer(text)] + [m.group(0) for m in TEMPLATE.finditer(text)]


_REDIRECT = re.compile(r"(\d*)(>>|>&|<<<|<<-|<<|<&|<>|>\||>|<|&>>|&>)")


def _expansion_end(s: str, j: int) -> int:
    """The index just past the ``${...}`` / ``$(...)`` that starts at ``s[j]`` (``$``), nested
    braces or parentheses of the same kind counted; ``len(s)`` when it is not closed."""
    return bracket_end(s, j + 2, s[j + 1], "}" if s[j + 1] == "{" else ")")[0]


# A here-document body that starts a server: read as the script it is written to
_LAUNCH_TEXT = re.compile(
    r"-m\s+(sglang\.launch_server|dynamo\.sglang|sglang_router\.launch_router)\b|\bsglang\s+serve\b"
)
_SCRIPT_TARGET = re.compile(r"\.(sh|bash)$")
_SHELL_PROGRAMS = {"bash", "sh", "zsh", "dash", "ksh"}


def _heredoc_script(body: str, line_words: list[str], written: list[str]) -> bool:
    """Whether a here-document body is a shell script that starts a server: it names a
    launch, and it is written to a ``*.sh`` file, starts with ``#!`` and is written to a
    file (``written``: the line's ``>``/``>>`` targets; or given to ``tee``), or is fed to a
    shell (``bash <<EOF``, ``ssh HOST bash <<EOF``). A body given to Python or written to a
    YAML or JSON file is data, never read as commands; so is a ``#!`` body only printed
    (``cat <<EOF`` to the terminal: a usage text or an example shown, which no shell runs)."""
    if not _LAUNCH_TEXT.search(body):
        return False
    names = [w.rsplit("/", 1)[-1] for w in line_words]
    return (
        (body.lstrip().startswith("#!") and (bool(written) or "tee" in names))
        or any(_SCRIPT_TARGET.search(w) for w in line_words)
        or any(n in _SHELL_PROGRAMS for n in names)
    )


_HEREDOC_ESCAPE = re.compile(r"\\([$`\\])")


def _heredoc_expand(body: str, scope: Scope, where: Location) -> str:
    """An unquoted here-document's body as the outer shell writes it: its ``$`` references
    expanded with ``scope`` (those it cannot resolve stay as written, to be resolved, or
    not, where the script runs), ``\\$``, ``\\``` and ``\\\\`` as the bare character."""
    out: list[str] = []
    i = 0
    for m in _HEREDOC_ESCAPE.finditer(body):
        out.append(expand(body[i : m.start()], scope, where, [], syntax="shell"))
        out.append(m.group(1))
        i = m.end()
    out.append(expand(body[i:], scope, where, [], syntax="shell"))
    return "".join(out)


class Lexer:
    """Yields statements (lists of ``Word``) of ``text``; ``scope`` is consulted while
    words are built. ``first_line``: the 1-based line of ``text``'s first character."""

    def __init__(self, text: str, file: str, first_line: int, scope: Scope):
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = first_line
        self.file = file
        self.scope = scope

    def statements(self) -> Iterator[tuple[list[Word], str]]:
        """(words, terminator) for each simple command; the terminator is the operator
        that ended it (``"\\n"``, ``"&&"``, ``"&"``, ``"|"``... or ``""`` at the end)."""
        words: list[Word] = []
        skip_next = False
        heredoc = False
        redirect = ""
        # here-document delimiters on this line: (delimiter, strip tabs, delimiter quoted)
        pending: list[tuple[str, bool, bool]] = []
        line_words: list[str] = []  # the words and redirect targets of this line's commands
        written: list[str] = []  # this line's output redirect targets (> / >> / >|)
        while True:
            tok = self._next()
            if tok is None:
                if words:
                    yield words, ""
                return
            kind, val = tok
            if kind == "op":
                if val == "\n" and pending:
                    line_words += [w.text for w in words]
                    scripts = self._heredoc_bodies(pending, line_words, written)
                    pending = []
                    if words:
                        yield words, val
                        words = []
                    for script in scripts:
                        yield script, "\n"
                    line_words, written = [], []
                    continue
                if val == "\n":
                    line_words, written = [], []
                else:
                    line_words += [w.text for w in words]
                if val in ("{", "}"):
                    # a brace group / function body: a marker statement (no words), so a
                    # reader can tell where a function's body ends
                    if words:
                        yield words, val
                        words = []
                    yield [], val
                    continue
                if words:
                    yield words, val
                elif val == ";;":
                    yield [], val  # an empty case-branch end (kvcheck.sources.deployments.branches)
                words = []
                continue
            if kind == "redir":
                # "> log", ">> log", "< in", "&> log": the target word is not an argument;
                # "<<EOF": the lines up to EOF are data, not commands
                skip_next = True
                heredoc = val in ("<<", "<<-")
                strip = val == "<<-"
                redirect = val
                continue
            if not val:
                continue
            if skip_next:
                skip_next = False
                if heredoc:
                    pending.append((val[0].text, strip, val[0].quoted))
                    heredoc = False
                elif redirect in (">", ">>", ">|"):
                    line_words.append(val[0].text)  # the file a here-document may be written to
                    written.append(val[0].text)
                val = val[1:]
            words.extend(val)

    def _heredoc_bodies(
        self, pending: list[tuple[str, bool, bool]], line_words: list[str], written: list[str]
    ) -> list[list[Word]]:
        """Read past the bodies of the here-documents that start on the next line; those
        that are shell scripts which start a server (``_heredoc_script``) come back as a
        ``bash -c BODY`` statement each, the body as the script will run: in an unquoted
        here-document the outer shell expands ``$VAR``/``${VAR}`` when it writes it (with
        the variables set at that point) and ``\\$``, ``\\```, ``\\\\`` are the
        characters themselves (POSIX "Here-Document"; bash ``heredoc`` expansion); a quoted
        delimiter (``<<'EOF'``) writes the body as it is. The body's words keep their lines."""
        out: list[list[Word]] = []
        for delim, strip, quoted in pending:
            first = self.line
            body: list[str] = []
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                end = self.n if end < 0 else end
                line = self.s[self.i : end]
                self.i = min(end + 1, self.n)
                self.line += 1
                if (line.lstrip("\t") if strip else line) == delim:
                    break
                body.append(line.lstrip("\t") if strip else line)
            text = "\n".join(body)
            if _heredoc_script(text, line_words, written):
                if not quoted:
                    text = _heredoc_expand(text, self.scope, Location(self.file, first))
                out.append([Word("bash", first), Word("-c", first), Word(text, first, [], True, False)])
        return out

    # -- lexer ---------------------------------------------------------------------
    def _next(self) -> tuple[str, Any] | None:
        s, n = self.s, self.n
        # skip blanks and continuations
        while self.i < n:
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\\" and self.i + 1 < n and s[self.i + 1] == "\n":
                self.i += 2
                self.line += 1
            elif c == "#":
                while self.i < n and s[self.i] != "\n":
                    self.i += 1
            else:
                break
        if self.i >= n:
            return None
        c = s[self.i]
        if c == "\n":
            self.i += 1
            self.line += 1
            return ("op", "\n")
        for op in ("&&", "||", ";;"):
            if s.startswith(op, self.i):
                self.i += 2
                return ("op", op)
        m = _REDIRECT.match(s, self.i)
        if m and not PLACEHOLDER.match(s, self.i):
            self.i = m.end()
            op = m.group(2)
            if op in (">&", "<&"):
                # descriptor duplication: consume the descriptor (1, 2, -) right here
                k = self.i
                while k < n and (s[k].isdigit() or s[k] == "-"):
                    k += 1
                if k > self.i:
                    self.i = k
                    return self._next()
            return ("redir", op)
        if c in ";&|()":
            self.i += 1
            return ("op", c)
        if c in "{}" and (self.i + 1 >= n or s[self.i + 1] in " \t\n;"):
            self.i += 1
            return ("op", c)
        return ("word", self._word())

    def _array(self, name: str, append: bool) -> None:
        """``NAME=( words... )`` / ``NAME+=(...)``: the elements (expanded, each at its
        line) are kept in ``scope.arrays`` for ``"${NAME[@]}"``."""
        elems: list[Word] = []
        while True:
            tok = self._next()
            if tok is None:
                break
            kind, val = tok
            if kind == "op":
                if val == ")":
                    break
                continue  # newlines inside the parentheses
            if kind == "word" and val:
                elems.extend(val)
        arrays = self.scope.arrays
        arrays[name] = (arrays.get(name, []) if append else []) + elems

    def _word(self) -> list[Word]:
        s, n = self.s, self.n
        start_line = self.line
        m = _ARRAY_ASSIGN.match(s, self.i)
        if m:
            self.i = m.end()
            self._array(m.group(1), bool(m.group(2)))
            return []
        m = _ARRAY_USE.match(s, self.i)
        if m and m.group(2) in self.scope.arrays and (m.end() >= n or s[m.end()] in " \t\r\n;&|)"):
            self.i = m.end()
            items = self.scope.arrays[m.group(2)]
            if m.group(3) == "*" and m.group(1):  # "${A[*]}": one word
                return [
                    Word(
                        " ".join(w.text for w in items),
                        start_line,
                        [u for w in items for u in w.unresolved],
                        True,
                        False,
                    )
                ]
            return [Word(w.text, w.line, list(w.unresolved), w.quoted, w.single_quoted_only, w.file) for w in items]
        parts: list[str] = []
        unresolved: list[str] = []
        quoted = False
        only_single = True
        where = Location(self.file, start_line)

        def exp(raw: str) -> str:
            miss: list[str] = []
            out = expand(raw, self.scope, Location(self.file, self.line), miss, syntax="shell")
            unresolved.extend(miss)
            return out

        raw_unquoted: list[str] = []
        split_parts: list[tuple[int, bool]] = []

        def flush() -> None:
            if raw_unquoted:
                raw = "".join(raw_unquoted)
                value = exp(raw)
                # an unquoted expansion is split into fields at blanks, as the shell does
                split_parts.append((len(parts), "$" in raw or "`" in raw))
                parts.append(value)
                raw_unquoted.clear()

        while self.i < n:
            c = s[self.i]
            if c in "<{":
                m = PLACEHOLDER.match(s, self.i) if c == "<" else TEMPLATE.match(s, self.i)
                if m:
                    flush()
                    parts.append(m.group(0))
                    unresolved.append(m.group(0))
                    only_single = False
                    self.i = m.end()
                    continue
            if c in " \t\r\n;&|()<>":
                if c in "<>" and not raw_unquoted and not parts:
                    break
                if c in "<>":
                    break
                break
            if c == "\\":
                if self.i + 1 < n:
                    nxt = s[self.i + 1]
                    if nxt == "\n":
                        self.i += 2
                        self.line += 1
                        continue
                    flush()
                    parts.append(nxt)
                    self.i += 2
                    continue
                self.i += 1
                continue
            if c == "'":
                flush()
                j = s.find("'", self.i + 1)
                j = n if j < 0 else j
                chunk = s[self.i + 1 : j]
                self.line += chunk.count("\n")
                parts.append(chunk)
                quoted = True
                self.i = j + 1
                continue
            if c == "$" and self.i + 1 < n and s[self.i + 1] == "'":
                flush()
                j = self.i + 2
                buf: list[str] = []
                while j < n and s[j] != "'":
                    if s[j] == "\\" and j + 1 < n:
                        buf.append({"n": "\n", "t": "\t", "\\": "\\", "'": "'"}.get(s[j + 1], s[j + 1]))
                        j += 2
                        continue
                    buf.append(s[j])
                    j += 1
                parts.append("".join(buf))
                quoted = True
                self.i = j + 1
                continue
            if c == '"':
                flush()
                only_single = False
                j = self.i + 1
                buf = []
                while j < n and s[j] != '"':
                    if s[j] == "\\" and j + 1 < n and s[j + 1] in '$`"\\\n':
                        if s[j + 1] == "\n":
                            self.line += 1
                            j += 2
                            continue
                        buf.append("\\" + s[j + 1] if s[j + 1] == "$" else s[j + 1])
                        j += 2
                        continue
                    if s[j] == "$" and j + 1 < n and s[j + 1] in "{(":
                        # copy a ${...} / $(...) whole, quotes inside included
                        k = _expansion_end(s, j)
                        buf.append(s[j:k])
                        j = k
                        continue
                    if s[j] == "`":
                        # a command substitution inside double quotes ("`cat f`"): its
                        # output is not known (never run, its target never read)
                        k = s.find("`", j + 1)
                        k = n if k < 0 else k
                        unresolved.append(s[j : k + 1])
                        buf.append(s[j : k + 1])
                        self.line += s.count("\n", j, k)
                        j = k + 1
                        continue
                    if s[j] == "\n":
                        self.line += 1
                    buf.append(s[j])
                    j += 1
                raw = "".join(buf)
                # an escaped \$ must stay a literal dollar: protect it from expansion
                raw = raw.replace("\\$", "\x00")
                parts.append(exp(raw).replace("\x00", "$"))
                quoted = True
                self.i = j + 1
                continue
            if c == "$" and self.i + 1 < n and s[self.i + 1] in "{(":
                k = _expansion_end(s, self.i)
                raw_unquoted.append(s[self.i : k])
                only_single = False
                self.i = k
                continue
            if c == "`":
                j = s.find("`", self.i + 1)
                j = n if j < 0 else j
                unresolved.append("`" + s[self.i + 1 : j] + "`")
                raw_unquoted.append(s[self.i : j + 1])
                self.i = j + 1
                continue
            if c == "$":
                only_single = False
            raw_unquoted.append(c)
            self.i += 1
        flush()
        del where
        splittable = {i for i, sp in split_parts if sp}
        if not any(any(ch in parts[i] for ch in " \t\n") for i in splittable):
            joined = "".join(parts)
            if not joined and not quoted and splittable and not unresolved:
                # an unquoted expansion of an empty value is no word at all (the shell
                # drops it): ``$EXTRA_ARGS`` with EXTRA_ARGS="" adds no '' argument
                return []
            return [Word(joined, start_line, unresolved, quoted, quoted and only_single)]
        fields: list[list[str]] = [[]]
        solid = [False]  # a field with quoted or literal text is kept even if empty
        for i, part in enumerate(parts):
            if i not in splittable:
                fields[-1].append(part)
                solid[-1] = True
                continue
            pieces = re.split(r"[ \t\n]+", part)
            fields[-1].append(pieces[0])
            for piece in pieces[1:]:
                fields.append([piece])
                solid.append(False)
        words = ["".join(f) for f in fields]
        # each field keeps the unresolved references still written in it (``ARGS="--tp 8
        # --model-path $MODEL"``: only ``$MODEL``'s field); all of them where none shows
        visible = any(u in w for w in words for u in unresolved)
        return [
            Word(
                w,
                start_line,
                [u for u in unresolved if u in w] if visible else list(unresolved),
                quoted,
                quoted and only_single,
            )
            for w, keep in zip(words, solid, strict=False)
            if w or keep
        ]


def words_of(text: str, file: str, first_line: int, scope: Scope) -> Iterator[tuple[list[Word], str]]:
    """Statements of ``text`` (see ``Lexer.statements``)."""
    return Lexer(text, file, first_line, scope).statements()
