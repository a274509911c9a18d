"""Lines that are not SGLang's own, as ``kvcheck explain`` reports them.

Which engine or library wrote a line is decided by ``kvcheck.explain.lines`` (each
project's own log format: vLLM's ``(Worker_DP0_EP0 pid=N) ERROR ... [file.py:N]``
prefix, TensorRT-LLM's ``[TRT-LLM]``, glog lines of Mooncake's and NIXL's C++ files,
UCX's ``UCX  ERROR`` and signal handler, ...). A line of another engine is never
explained from SGLang's code; ``ForeignLines`` is its summary in the JSON contract
(``foreign``), ``meaning`` saying what kvcheck explains for that engine.
"""

from __future__ import annotations

from pydantic import BaseModel


class ForeignLines(BaseModel):
    """Lines of one engine other than SGLang: count, first/last line numbers, the first
    line (cut to 300 characters) and what kvcheck explains for that engine."""

    engine: str
    name: str
    meaning: str
    count: int = 0
    first_line: int = 0
    last_line: int = 0
    example: str = ""
