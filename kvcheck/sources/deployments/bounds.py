"""How much of a deployment file kvcheck reads, checked on the text before any parser walks
it (``read_deployment_file`` calls these first): the size of a launch script, the number of
SGLang launch lines, line lengths, and for YAML the item count and flow nesting depth.
Past a bound the file is refused (``InputError``, exit 2, naming the file and line).
"""

from __future__ import annotations

import re

from kvcheck.errors import InputError

# Bounds on the text itself, so that reading costs seconds at most: a launch script
# (read by a character-level shell lexer) is far smaller than a manifest; no line of a
# real deployment file is a megabyte; flow nesting past the YAML depth limit is refused
# before the parser walks it.
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
MAX_LINE_CHARS = 1024 * 1024
_DEEP_FLOW = re.compile(r"[\[{](?:[ \t]*[\[{]){200}")


def check_shape(text: str, file: str, yamlish: bool) -> None:
    from kvcheck.sources.limits import clip

    if not yamlish and len(text) > MAX_SCRIPT_BYTES:
        raise InputError(
            f"{clip(len(text))} characters of launch script; kvcheck reads scripts and docs pages up to "
            f"{MAX_SCRIPT_BYTES} (manifests and recipes up to 50 MiB)",
            source=file,
        )
    if yamlish:
        from kvcheck.sources.deployments.yamlnodes import MAX_NODES

        estimate = text.count("\n") + text.count(",")  # as load_documents bounds it, before any regex walks the text
        if estimate > 2 * MAX_NODES:
            raise InputError(
                f"YAML holds about {estimate:,} items, more than kvcheck reads in one deployment ({MAX_NODES:,} "
                "nodes); refusing to parse it",
                source=file,
            )
    half = MAX_LINE_CHARS // 2
    for i in range(0, len(text), half):  # a longer line holds a whole aligned half-block without a line break
        if text.find("\n", i, i + half) < 0 and len(text) - i >= half:
            start = text.rfind("\n", 0, i) + 1
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            if end - start > MAX_LINE_CHARS:
                line = text.count("\n", 0, start) + 1
                raise InputError(
                    f"line {line} is longer than {MAX_LINE_CHARS} characters; kvcheck reads lines up to that length",
                    source=file,
                )
    if yamlish and text.count("[") + text.count("{") > 200 and _DEEP_FLOW.search(text):
        raise InputError("YAML nesting deeper than 200 levels ([[[... or {{{...); refusing to read it", source=file)


def check_launch_count(text: str, file: str) -> None:
    """The launch lines a file holds (one per SGLang container or script line) against
    kvcheck's containers cap, counted on the text before anything is parsed."""
    from kvcheck.sources.limits import check_cap

    n = sum(
        text.count(w) for w in ("sglang.launch_server", "dynamo.sglang", "sglang serve", "sglang_router.launch_router")
    )
    check_cap("containers", n, field="SGLang launch lines (containers)", source=file)
