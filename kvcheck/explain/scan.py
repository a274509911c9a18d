"""The catalog compiled for streaming, the log read in bounded blocks, and the partial
recognition of a pasted message cut short.

``_Scanner`` gives each catalog entry one token (the longest word of its literal text no
value touches); a line is split into words once and intersected with the token set, so a
line holding no entry's token costs almost nothing. ``iter_log_blocks`` reads a binary
stream ``block`` bytes at a time with at most ``block + 4 x MAX_LOG_LINE`` bytes held.
``_prefix_partial`` / ``_field_partial`` recognize a message pasted from its start or
around one of its fields, never from a stretch of words alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from kvcheck.explain.catalog import Catalog, Entry

if TYPE_CHECKING:
    from kvcheck.explain.prefixes import Paste

_MIN_PARTIAL = 24  # characters of literal text needed for a partial recognition
_MAX_PARTIAL_LINES = 50  # partial recognition is for pasted messages, not whole logs
_MAX_HIT_TEXT = 2000  # characters of a hit's text and values kept for the report
_WRAP = 3  # lines before and after a line that a wrapped message may span
_ANCHOR_LEN = 24  # characters of a literal stretch searched as a substring


class _Scanner:
    """The catalog compiled for streaming. Each entry gets one *token*: the longest
    whitespace-delimited word inside its template's literal text that a value cannot
    touch (``registered`` for "... decode registered fewer KV regions ({n}) ..."); a
    line is split into words once and intersected with the set of tokens (a hash
    lookup per word, in C), so a line holding no entry's token costs almost nothing.
    Entries without such a word (``NIXL_ERR_BACKEND``) are found by substring. Only
    candidate entries' own regexes run on a line.
    """

    def __init__(self, catalog: Catalog):
        from kvcheck.explain.catalog import _PLACEHOLDER

        self.entries = list(catalog.entries)
        self.by_token: dict[str, list[int]] = {}
        subs: list[tuple[int, str]] = []
        for i, entry in enumerate(self.entries):
            parts = _PLACEHOLDER.split(entry.template.rstrip())
            words: list[str] = []
            for j in range(0, len(parts), 2):
                stretch = parts[j]
                toks = stretch.split()
                if toks and not stretch[:1].isspace():
                    toks = toks[1:]  # may be glued to a value or to what precedes the message
                if toks and not stretch[-1:].isspace():
                    toks = toks[:-1]
                words += toks
            if words:
                self.by_token.setdefault(max(words, key=len), []).append(i)
            else:
                stretches = [p.strip() for p in entry.literal_parts if p.strip()]
                subs.append((i, max(stretches, key=len)[:_ANCHOR_LEN] if stretches else ""))
        self.tokens = frozenset(self.by_token)
        self.match_all = [i for i, a in subs if not a]
        self.subs = [(i, a) for i, a in subs if a]
        self.sub_re = (
            re.compile("|".join(sorted({re.escape(a) for _, a in self.subs}, key=len, reverse=True)))
            if self.subs
            else None
        )

    def candidates(self, line: str) -> list[Entry]:
        """Entries that may match ``line``, in catalog order."""
        found: set[int] = set(self.match_all)
        for tok in self.tokens.intersection(line.split()):
            found.update(self.by_token[tok])
        if self.sub_re is not None and self.sub_re.search(line) is not None:
            found.update(i for i, a in self.subs if a in line)
        return [self.entries[i] for i in sorted(found)]


_SCANNERS: dict[int, tuple[Catalog, _Scanner]] = {}


def _scanner(catalog: Catalog) -> _Scanner:
    """The compiled scanner of ``catalog`` (cached per catalog object)."""
    got = _SCANNERS.get(id(catalog))
    if got is None or got[0] is not catalog:
        got = _SCANNERS[id(catalog)] = (catalog, _Scanner(catalog))
    return got[1]


_BLOCK = 1 << 20  # bytes of a log read at a time
_BATCH = 8192  # lines of an iterable handled at a time


# What the first bytes of a log say it is: compressed (read through), UTF-16/32 (a
# Windows copy: decoded), or binary data (refused).
_SNIFF = 64 * 1024  # bytes looked at
_GZIP, _BZIP2, _XZ = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00"
_REFUSED_MAGIC = (
    (b"\x28\xb5\x2f\xfd", "zstd-compressed (decompress it first: zstd -d)"),
    (b"PK\x03\x04", "a zip archive (unpack the log first)"),
    (b"\x7fELF", "an executable (ELF), not a log"),
)
_BOMS = (  # longest first: UTF-32's little-endian mark starts with UTF-16's
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xef\xbb\xbf", "utf-8"),
)
# Past this many bytes inflated, a compressed log is refused (a few KB can inflate to TBs);
# so is one inflating past MAX_INFLATION times its compressed size once past INFLATION_FREE
# bytes (server logs compress 5-20x; a gzip of blank lines 1000x, and its millions of
# lines each cost a reading).
MAX_INFLATED_LOG = 1 << 30
MAX_INFLATION = 100
INFLATION_FREE = 1 << 20
# control bytes a text log does not hold (tab, line ends, form feed, ESC for colours kept)
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")
_NUL_RUN = re.compile(rb"\x00{16,}")  # a crash leaves NUL-filled holes in a log file: not binary


class _Prefixed:
    """``head`` (bytes already read), then the rest of ``stream``: a ``read(n)`` source
    that counts the bytes it gave (``given``)."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head, self._stream = head, stream
        self.given = 0

    def read(self, n: int = -1) -> bytes:
        if self._head:
            out = self._head if n < 0 else self._head[:n]
            self._head = self._head[len(out) :]
        else:
            out = self._stream.read(n)
        self.given += len(out)
        return out


class _Recoded:
    """A stream in another text encoding (``codec``) read as UTF-8 bytes (bad bytes replaced)."""

    def __init__(self, stream, codec: str):
        import codecs

        self._stream = stream
        self._dec = codecs.getincrementaldecoder(codec)("replace")
        self._done = False

    def read(self, n: int = -1) -> bytes:
        while not self._done:
            data = self._stream.read(n if n > 0 else 1 << 20)
            final = not data
            text = self._dec.decode(data, final=final)
            self._done = final
            if text:
                return text.encode("utf-8")
        return b""


class _Capped:
    """A decompressed stream refused past ``MAX_INFLATED_LOG`` bytes (``InputError``)."""

    def __init__(self, stream, source: str, kind: str, raw: _Prefixed):
        self._stream, self._source, self._kind, self._read, self._raw = stream, source, kind, 0, raw

    def read(self, n: int = -1) -> bytes:
        from kvcheck.errors import InputError

        try:
            data = self._stream.read(n)
        except (OSError, EOFError, ValueError) as exc:  # gzip.BadGzipFile is an OSError
            raise InputError(f"cannot read the {self._kind} log: {exc}", source=self._source) from None
        self._read += len(data)
        if self._read > INFLATION_FREE and self._read > MAX_INFLATION * max(1, self._raw.given):
            raise InputError(
                f"the {self._kind} log inflates more than {MAX_INFLATION} times its size ({self._raw.given} bytes to "
                f"over {self._read}): a compression bomb, or a log of blank lines; decompress it and pass the part "
                "around the failure",
                source=self._source,
            )
        if self._read > MAX_INFLATED_LOG:
            raise InputError(
                f"the {self._kind} log inflates past {MAX_INFLATED_LOG >> 20} MiB; decompress it and pass the part "
                "around the failure (kvcheck reads a plain log of any size)",
                source=self._source,
            )
        return data


def open_log_text(stream: BinaryIO, source: str = "the log", *, _depth: int = 0):
    """``stream`` (a log as the user gave it) as UTF-8 bytes for ``iter_log_blocks``:

    * gzip, bzip2 and xz logs are read through (``kubectl logs ... | gzip``; refused past
      ``MAX_INFLATED_LOG`` bytes inflated, or ``MAX_INFLATION`` times the compressed
      size); zstd, zip and executables are refused;
    * a UTF-16 or UTF-32 log (a Windows copy: byte-order mark, or UTF-16 without one, its
      every other byte NUL) is decoded; a UTF-8 byte-order mark is dropped;
    * binary data (more than 5% of the first 64 KiB control bytes, NUL-filled holes left
      by a crash not counted) is refused.

    Refusals are ``InputError`` (exit 2) naming ``source``. Returns an object with
    ``read(n)``."""
    import bz2
    import gzip
    import lzma

    from kvcheck.errors import InputError

    head = b""
    while len(head) < _SNIFF:
        chunk = stream.read(_SNIFF - len(head))
        if not chunk:
            break
        head += chunk
    rest = _Prefixed(head, stream)
    if _depth == 0:
        src: Any = rest  # a read(n) source is all the decompressors use
        inflated: Any = None
        if head.startswith(_GZIP):
            inflated, kind = gzip.GzipFile(fileobj=src), "gzip-compressed"
        elif head.startswith(_XZ):
            inflated, kind = lzma.LZMAFile(src), "xz-compressed"
        elif head.startswith(_BZIP2) and head[3:4].isdigit():
            inflated, kind = bz2.BZ2File(src), "bzip2-compressed"
        if inflated is not None:
            return open_log_text(cast(BinaryIO, _Capped(inflated, source, kind, rest)), source, _depth=1)
    for magic, what in _REFUSED_MAGIC:
        if head.startswith(magic):
            raise InputError(f"is {what}; kvcheck explain reads a text log", source=source)
    for bom, codec in _BOMS:
        if head.startswith(bom):
            body = _Prefixed(head[len(bom) :], stream)
            return body if codec == "utf-8" else _Recoded(body, codec)
    sample = head[: _SNIFF & ~1]
    if len(sample) >= 16 and sample.count(0) * 3 >= len(sample):
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd >= 0.9 * (odd + even) and even < len(sample) // 20:
            return _Recoded(rest, "utf-16-le")
        if even >= 0.9 * (odd + even) and odd < len(sample) // 20:
            return _Recoded(rest, "utf-16-be")
    text = _NUL_RUN.sub(b"", head)
    if len(text) >= 64 and len(_CONTROL.findall(text)) * 20 > len(text):
        raise InputError(
            "is binary data, not a text log (over 5% of its first bytes are control bytes); pass the server's log "
            "as text",
            source=source,
        )
    return rest


def iter_log_blocks(stream: BinaryIO, *, block: int = _BLOCK) -> Iterator[list[str]]:
    """A binary log stream as lists of lines (UTF-8, bad bytes replaced, no line ends),
    read ``block`` bytes at a time; each line cut to ``MAX_LOG_LINE`` characters. At
    most ``block`` + ``4 x MAX_LOG_LINE`` bytes are held, however long a line is (the
    rest of an over-long line is read and dropped)."""
    from kvcheck.sources.limits import MAX_LOG_LINE

    limit = MAX_LOG_LINE * 4  # UTF-8 bytes for MAX_LOG_LINE characters
    carry = b""
    dropping = False
    while True:
        data = stream.read(block)
        if not data:
            break
        if dropping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data, dropping = data[nl + 1 :], False
        data = carry + data if carry else data
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
        else:
            carry = data[cut + 1 :]
            yield _lines_of(data[:cut], limit, MAX_LOG_LINE)
        if len(carry) > limit:
            yield _lines_of(carry[:limit], limit, MAX_LOG_LINE)
            carry, dropping = b"", True
    if carry:
        yield _lines_of(carry, limit, MAX_LOG_LINE)


def _lines_of(data: bytes, byte_limit: int, char_limit: int) -> list[str]:
    text = data.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").removesuffix("\r").replace("\r", "\n")
    lines = text.split("\n")
    if max(map(len, lines)) > char_limit:
        lines = [ln[:char_limit] for ln in lines]
    return lines


def _uncollect(block: list[str], paste: Paste | None = None) -> tuple[list[str], list[str]]:
    """The block's lines as the processes printed them (``prefixes.Paste``: the shape the
    paste was taken in, each line's collectors' prefixes, wrapped or elided traceback
    frames put back in Python's form) and the role each prefix named. ``paste`` carries
    the shape read from the log's first block (a new one: the block is a whole log)."""
    from kvcheck.explain.prefixes import Paste

    return (paste or Paste()).block(block)


def _prefix_partial(line: str, entry: Entry) -> str | None:
    """The part of ``line`` that is the start of ``entry``'s message: a prefix of the
    template's first literal stretch, at least ``_MIN_PARTIAL`` characters, cut at a word
    boundary, starting at a word boundary of the line, and either the whole first stretch
    or running to the end of the line (a truncated paste). None otherwise."""
    from kvcheck.explain.catalog import _PLACEHOLDER

    p0 = _PLACEHOLDER.split(entry.template.rstrip())[0]
    if len(p0.strip()) < _MIN_PARTIAL:
        return None
    for k in range(len(p0), _MIN_PARTIAL - 1, -1):
        if k < len(p0) and _is_word(p0[k - 1]) and _is_word(p0[k]):
            continue
        pre = p0[:k]
        i = line.find(pre)
        while i >= 0 and i > 0 and _is_word(line[i - 1]) and _is_word(pre[0]):
            i = line.find(pre, i + 1)
        if i < 0:
            continue
        if k == len(p0) or not line[i + k :].strip():
            return line[i : i + k]
        return None
    return None


_MIN_OPENING_WORDS = 3  # whole words a pasted opening must have
_MIN_OPENING = 12  # and characters
_EXC_PREFIX = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Warning):\s+")


def _opening(line: str, catalog: Catalog) -> tuple[str, Entry] | None:
    """The catalog entry whose message ``line`` is the opening of, and nothing more: the
    line (an exception type before it allowed) is the first whole words of one entry's
    template, at least ``_MIN_OPENING_WORDS`` words and ``_MIN_OPENING`` characters, ending
    at a word's end (``Page size mismatch`` of ``Page size mismatch: prefill server has
    page_size=...``). The opening must be distinctive: no other catalog entry, no other
    message format of any scanned SGLang release and no format of the projects next to it
    (vLLM, LMCache, NIXL, UCX, Mooncake ...) starts with it. A stretch from a message's
    middle, or words inside a longer line, never qualify (the fragment problem: issue 20).
    Returns (the opening as pasted, the entry) or None."""
    from kvcheck.explain.catalog import _PLACEHOLDER

    text = _EXC_PREFIX.sub("", line, count=1).strip()
    if len(text) < _MIN_OPENING or len(text.split()) < _MIN_OPENING_WORDS or not _is_word(text[-1]):
        text = text.rstrip(":.,;")
        if len(text) < _MIN_OPENING or len(text.split()) < _MIN_OPENING_WORDS or not _is_word(text[-1]):
            return None
    starts = []
    for e in catalog.entries:
        t = e.template.rstrip()
        if t.startswith(text) and t != text and (len(t) == len(text) or not _is_word(t[len(text)])):
            starts.append(e)
    if len(starts) != 1:
        return None
    entry = starts[0]
    own = _PLACEHOLDER.split(entry.template.rstrip())[0].strip()
    if _formats_start_with(text, own):
        return None
    return text, entry


def _formats_start_with(text: str, own: str) -> bool:
    """Whether a message format other than ``own`` (the entry's first literal text) starts
    with ``text`` at a word's end: any SGLang release's, or another project's."""
    from kvcheck.explain.formats import load_engine_formats, load_formats

    for index in (load_formats(), *load_engine_formats().values()):
        for f in index.formats:
            first = f[0][0].lstrip() if f[0] else ""
            if not first.startswith(text) or first.strip() == own:
                continue
            if len(first) == len(text) or not _is_word(first[len(text)]):
                return True
    return False


def _field_partial(line: str, entry: Entry) -> str | None:
    """The part of ``line`` that reproduces a stretch of ``entry``'s message around one of
    its fields (an int, float, word or list value with the literal text on both sides,
    at least ``_MIN_PARTIAL`` literal characters in all): a paste that starts or ends
    inside the message but keeps its structure. Literal words alone never qualify."""
    from kvcheck.explain.catalog import _PLACEHOLDER, FIELD_PATTERNS

    parts = _PLACEHOLDER.split(entry.template.rstrip())
    for i in range(1, len(parts), 2):
        shape = entry.fields.get(parts[i], "text")
        if shape == "text":
            continue
        left, right = parts[i - 1], parts[i + 1] if i + 1 < len(parts) else ""
        if len(left) < 4:
            continue
        rx = re.compile(
            re.escape(left[-4:]) + "(" + FIELD_PATTERNS[shape] + ")" + (re.escape(right[:1]) if right else "")
        )
        for m in rx.finditer(line):
            a = m.start() + 4
            k = 0  # literal characters matched leftwards from the field
            while k < len(left) and a - k - 1 >= 0 and line[a - k - 1] == left[len(left) - k - 1]:
                k += 1
            start = a - k
            if start > 0 and _is_word(line[start - 1]) and _is_word(line[start]):
                continue
            b = m.end(1)
            r = 0
            while r < len(right) and b + r < len(line) and line[b + r] == right[r]:
                r += 1
            if k + r >= _MIN_PARTIAL:
                return line[start : b + r]
    return None


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _join(lines: list[str]) -> tuple[str, list[int]]:
    """The lines stripped and joined by one space (a message wrapped over several lines
    reads as one), and the offset in that text where each line starts (line N starts at
    ``starts[N - 1]``), to map a match back to the lines it spans."""
    starts: list[int] = []
    parts: list[str] = []
    offset = 0
    for line in lines:
        starts.append(offset)
        part = line.strip()
        parts.append(part)
        offset += len(part) + 1
    return " ".join(parts), starts
