"""Tracebacks as people paste them (issue 20): wrapped frames, elided directories, frames
without line numbers, per-line prefixes, ANSI colours and Windows line ends must read as
the traceback Python printed. The exception texts are produced by the interpreter and
numpy here, and the files are SGLang's (``release_index.json``, read from the wheels)."""

from __future__ import annotations

import numpy as np
import pytest

from kvcheck.explain import explain_text
from kvcheck.explain.logrelease import load_index
from kvcheck.explain.prefixes import mend_tracebacks

UTILS = "srt/disaggregation/common/utils.py"
CONN = "srt/disaggregation/mooncake/conn.py"


def _unpack_error() -> str:
    try:
        a, b, c = (1, 2)  # noqa: F841  the interpreter's own message
    except ValueError as e:
        return f"ValueError: {e}"
    raise AssertionError


def _broadcast_error() -> str:
    try:
        np.arange(3) + np.arange(0)[:, None] + np.arange(2)
    except ValueError as e:
        return f"ValueError: {e}"
    raise AssertionError


def _first(text: str):
    rep = explain_text(text, source="log").report
    assert rep is not None and rep.first_cause is not None
    return rep.first_cause


def test_the_files_used_are_sglangs_in_every_indexed_release():
    files = load_index()["files"]
    assert all(UTILS in files[v] and CONN in files[v] for v in files)


def test_a_frame_wrapped_before_its_function_is_joined_on_its_first_line():
    got = mend_tracebacks(['  File "sglang/srt/x/y.py", line 12,', "      in run_it", "    a, b = t"])
    assert got == ['  File "sglang/srt/x/y.py", line 12, in run_it', "", "    a, b = t"]


def test_a_frame_wrapped_after_its_in_is_joined():
    got = mend_tracebacks(['  File "sglang/srt/x/y.py", line 12, in', "      run_it", "    a, b = t"])
    assert got == ['  File "sglang/srt/x/y.py", line 12, in run_it', "", "    a, b = t"]


def test_a_frame_wrapped_inside_its_path_is_joined():
    got = mend_tracebacks(['  File "/usr/lib/python3/dist-packages/sglang/', f'{UTILS}", line 3, in f'])
    assert got[0] == f'  File "/usr/lib/python3/dist-packages/sglang/{UTILS}", line 3, in f' and got[1] == ""


def test_an_elided_path_takes_the_one_sglang_file_with_that_tail():
    got = mend_tracebacks([f'File ".../{UTILS.split("/", 2)[2]}", in group_concurrent_contiguous'])
    assert got == [f'File ".../sglang/{UTILS}", in group_concurrent_contiguous']
    # a tail several files share (or a single name) is left as pasted
    assert mend_tracebacks(['File ".../conn.py", in f']) == ['File ".../conn.py", in f']


@pytest.mark.parametrize(
    "dress",
    [
        lambda ln: ln,
        lambda ln: f"[2026-05-02 10:00:01 TP0] {ln}",  # SGLang's prefix on every line
        lambda ln: f"(Worker pid=812) {ln}",  # a process prefix on every line
        lambda ln: f"\x1b[31m{ln}\x1b[0m",  # a terminal's colours
    ],
)
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_wrapped_sglang_frame_is_sglangs_and_the_unpack_error_is_the_interpreters(dress, eol):
    lines = [
        f'File "sglang/{UTILS}", line 40,',
        "  in group_concurrent_contiguous",
        "    a, b, c = pair",
        _unpack_error(),
    ]
    f = _first(eol.join(dress(ln) for ln in lines) + eol)
    assert f.engine == "sglang"
    assert f.id == "python-shape-mismatch"
    assert "group_concurrent_contiguous" in f.cause and "not SGLang's text" not in f.title


def test_elided_frames_without_line_numbers_are_read_as_sglangs():
    text = (
        f'File ".../{CONN.split("/", 1)[1]}", in _send_kvcache_generic\n'
        "    x, y = group_concurrent_contiguous(...)\n"
        f'File "…/{UTILS.split("/", 2)[2]}", in group_concurrent_contiguous\n'
        "    brk = np.where(np.diff(src) != 1)\n"
        f"{_broadcast_error()}\n"
    )
    f = _first(text)
    # under SGLang's pairing of source and destination pages: the two lists' lengths differ
    assert f.engine == "sglang" and f.id == "pd-transfer-index-length-mismatch"
    assert f.phase == "first-transfer"  # _send_kvcache_generic moves the KV
    assert f"{UTILS}:" not in f.cause  # no line number invented
    # the installed release guards the pairing with its own message, which the cause names
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    src = Path(spec.origin).parent.joinpath(UTILS).read_text(encoding="utf-8")
    assert "requires equal-length src/dst index arrays" in src and "requires equal-length src/dst index arrays" in f.cause


def test_the_same_broadcast_error_elsewhere_is_the_general_shape_class():
    text = f'File "sglang/{CONN}", line 10, in some_other_function\n    x = a + b\n{_broadcast_error()}\n'
    assert _first(text).id == "python-shape-mismatch"


def _namedtuple_fields(module: str, cls: str) -> list[str]:
    """The fields of a NamedTuple class of the installed SGLang, read from its source."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")  # the package only: its subpackages import torch
    assert spec is not None and spec.origin
    path = Path(spec.origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def test_deepep_normal_output_into_the_cutedsl_runner_is_named_from_the_field_counts():
    mod = "sglang.srt.layers.moe.token_dispatcher.deepep"
    normal = _namedtuple_fields(mod, "DeepEPNormalDispatchOutput")
    ll = _namedtuple_fields(mod, "DeepEPLLDispatchOutput")
    try:
        a, b, c, d, e, f = tuple(normal)  # noqa: F841  what the runner does with a normal-mode output
    except ValueError as err:
        exc = f"ValueError: {err}"
    assert len(ll) == 6
    text = (
        'File "sglang/srt/layers/moe/moe_runner/flashinfer_cutedsl.py", line 600,\n'
        "  in fused_experts_deepep_to_flashinfer_cutedsl_fp4\n"
        "    hidden_states, hidden_states_scale, _, _, masked_m, _ = dispatch_output\n"
        f"{exc}\n"
    )
    f = _first(text)
    assert f.id == "moe-deepep-normal-output-to-ll-runner" and f.engine == "sglang"
    assert f"({len(ll)} fields" in f.cause and f"normal-mode output has {len(normal)}" in f.cause


def test_a_fault_dump_of_interpreter_frames_is_not_efa_and_its_check_is_not_sglangs_alone():
    text = (
        "(ApiServer_1 pid=100) INFO:     127.0.0.1:5000 - \"GET /metrics HTTP/1.1\" 200 OK\n"
        "!!!!!!! Segfault encountered !!!!!!!\n"
        '  File "<unknown>", line 0, in _PyObject_MakeTpCall\n'
        '  File "<unknown>", line 0, in _PyEval_EvalFrameDefault\n'
    )
    rep = explain_text(text, source="log").report
    assert "libfabric" not in {e.engine for e in rep.engines}
    f = rep.first_cause
    assert f is not None and f.id == "python-segfault-generic"
    assert any("vllm/distributed/kv_transfer" in c for c in f.checks)
