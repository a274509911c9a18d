"""The catalog of SGLang 0.5.23 PD/NIXL runtime messages (``catalog.yaml``), as data.

Each entry's ``template`` is the text the runtime formats, with ``{name}`` for each
variable part. ``Entry.regex`` turns it into a regular expression with named groups, so
a message or a log line can be recognized and its values read back.
"""

from __future__ import annotations

import re
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

RUNTIME = "sglang 0.5.23"

# Shapes a template field can take, as regex fragments.
FIELD_PATTERNS = {
    "int": r"-?\d+",
    "float": r"-?\d+(?:\.\d+)?",
    "word": r"[^\s,;]+?",
    "list": r"[\[(].*?[\])]",
    "text": r".+?",
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Source(BaseModel):
    """Where the runtime formats the message: a module and a function's qualified name
    in the installed SGLang, or ``project`` for text formatted outside SGLang (NIXL).
    ``template`` overrides the text compared with that function's literal."""

    model_config = ConfigDict(extra="forbid")

    module: str | None = None
    qualname: str | None = None
    project: str | None = None
    symbol: str | None = None
    template: str | None = None


class Entry(BaseModel):
    """One runtime message: its text, where and when it is raised, what it means, what
    triggers it, what the operator sees, the fix, and the kvcheck check predicting it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    severity: Literal["error", "warning"]
    type: str
    template: str
    fields: dict[str, str] = Field(default_factory=dict)
    wrap: Literal["tuple"] | None = None
    sources: list[Source]
    process: Literal["prefill", "decode", "both"]
    when: str
    meaning: str
    triggers: str
    operator_sees: str
    fix: str
    check: str | None = None
    # Why no input kvcheck reads can predict it (network, memory, timing, NIXL internals),
    # for an entry with no ``check``; every entry has one of the two.
    unpredictable_because: str | None = None
    example: dict[str, Any] = Field(default_factory=dict)
    reachable: bool = True
    generic: bool = False

    @cached_property
    def field_names(self) -> list[str]:
        """The template's field names, in order."""
        return _PLACEHOLDER.findall(self.template)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The template as a regex: literal text escaped, each ``{name}`` a named group
        shaped by ``fields`` (``text`` by default; a trailing text field takes the rest
        of the line). Whitespace closing the template is left out: loggers and
        terminals drop it at the end of a line, and a log line must still match."""
        template = self.template.rstrip()
        parts = _PLACEHOLDER.split(template)
        out = []
        for i, part in enumerate(parts):
            if i % 2 == 0:
                out.append(re.escape(part))
                continue
            shape = self.fields.get(part, "text")
            pattern = FIELD_PATTERNS[shape]
            last = i == len(parts) - 2 and parts[-1] == ""
            if last and shape in ("text", "word"):
                pattern = r".+" if shape == "text" else r"[^\s,;]+"
            out.append(f"(?P<{part}>{pattern})")
        prefix = r"(?<![\w-])" if template[:1].isalnum() or template[:1] == "-" else ""
        suffix = r"(?!\w)" if template[-1:].isalnum() else ""
        return re.compile(prefix + "".join(out) + suffix)

    @cached_property
    def literal_parts(self) -> list[str]:
        """The template's literal stretches (for partial recognition)."""
        return [p for i, p in enumerate(_PLACEHOLDER.split(self.template)) if i % 2 == 0 and p.strip()]

    def format(self, **values: Any) -> str:
        """The message as the runtime formats it for ``values`` (``str(exception)``:
        a ``wrap: tuple`` entry gives the one-element tuple's repr)."""
        text = self.template.format(**{k: values.get(k, self.example.get(k, "")) for k in self.field_names})
        if self.wrap == "tuple":
            return repr((text,))
        return text

    def example_text(self) -> str:
        """The message formatted with the entry's example values."""
        return self.format(**self.example)

    def summary(self) -> dict[str, Any]:
        """The entry as plain data (for JSON output)."""
        return {
            "id": self.id,
            "severity": self.severity,
            "type": self.type,
            "template": self.template,
            "process": self.process,
            "when": self.when,
            "reachable": self.reachable,
            "meaning": self.meaning,
            "triggers": self.triggers,
            "operator_sees": self.operator_sees,
            "fix": self.fix,
            "check": self.check,
            "sources": [s.model_dump(exclude_none=True) for s in self.sources],
        }


class Catalog(BaseModel):
    """All entries, in file order."""

    runtime: str = RUNTIME
    entries: list[Entry]

    def get(self, entry_id: str) -> Entry:
        """The entry with id ``entry_id`` (``KeyError`` if none)."""
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise KeyError(entry_id)


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """Load and validate the catalog shipped with kvcheck (cached)."""
    text = resources.files("kvcheck.explain").joinpath("catalog.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # our own file: libyaml when built
    catalog = Catalog(entries=data["entries"])
    ids = [e.id for e in catalog.entries]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate catalog ids: {sorted(dupes)}")
    return catalog
