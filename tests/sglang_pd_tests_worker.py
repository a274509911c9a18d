"""The launch lines of SGLang's own PD tests, built by one release's own test base class.

``PYTHONPATH=<release dir>:<deps dir> python tests/sglang_pd_tests_worker.py TESTS.json``
prints one JSON object per test: ``{"name", "release", "applies", "why", "prefill":
{"argv", "env"}, "decode": {...}, "model", "draft"}``.

Run as SGLang's CI runs the tests (``SGLANG_IS_IN_CI=true``): the release's base class
(``PDDisaggregationServerBase`` in ``sglang/test/server_fixtures/disaggregation_fixture.py``,
or ``TestDisaggregationBase`` in ``sglang/test/test_disaggregation_utils.py``) sets the
transfer backend and ``--disaggregation-ib-device`` in its ``setUpClass``; a test that uses
the base's own ``start_prefill``/``start_decode`` has them called with the release's
``popen_launch_pd_server`` replaced by a recorder (nothing is launched). The argv is then
parsed by the release's own ``ServerArgs.add_cli_args`` parser: a flag the release does not
know means the test is not in this release's form (``applies`` false, with the reason).
The model comes from the release's ``test_utils`` constant the test names.

What binds a test's form to a release (the code store has no tag index, so the file read
is not tied to a tag): everything the test takes from the release must be there. The
base class (and its module's helpers in ``requires``), the ``test_utils`` constants, the
class attributes the test sets on the base (a base that does not read
``prefill_tp_size`` would launch another pair than the test means), the keyword arguments
of its ``register_cuda_ci`` call (``register``), every ``module:name`` it imports from
SGLang (``imports``), and the release's ``ServerArgs`` parser accepting both argvs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import sys

# SGLang's CI: is_in_ci() true, eight RDMA devices named (get_rdma_devices_args reads this
# before sysfs), no GPUs visible to the recorder.
os.environ["SGLANG_IS_IN_CI"] = "true"
os.environ.setdefault("SGLANG_CI_RDMA_ALL_DEVICES", ",".join(f"mlx5_{i}" for i in range(8)))
os.environ.pop("CUDA_VISIBLE_DEVICES", None)

BASES = {
    "PDDisaggregationServerBase": "sglang.test.server_fixtures.disaggregation_fixture",
    "TestDisaggregationBase": "sglang.test.test_disaggregation_utils",
}


def _base(names: str | list[str]):
    """The first of ``names`` the release ships: (module, class, None) or (None, None, why)."""
    import importlib

    whys = []
    for name in [names] if isinstance(names, str) else names:
        mod_name = BASES[name]
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:
            whys.append(f"the release ships no {mod_name} ({e})")
            continue
        cls = getattr(mod, name, None)
        if cls is None:
            whys.append(f"{mod_name} has no {name}")
            continue
        return mod, cls, None
    return None, None, "; ".join(whys)


def _parser():
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(p)
    return p


def _refused(parser, argv: list[str]) -> str | None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, unknown = parser.parse_known_args(argv)
    except (SystemExit, argparse.ArgumentError) as e:
        return (err.getvalue().strip().splitlines() or [str(e)])[-1]
    if unknown:
        return f"unrecognized arguments: {' '.join(unknown)}"
    return None


def _top_level_names(tree) -> set[str]:
    """The names a module defines or imports at its top level (``ast`` of its source)."""
    import ast

    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _missing_imports(test: dict) -> str | None:
    """The first ``module:name`` of ``imports`` the release lacks, or a ``register_cuda_ci``
    call the release's signature refuses, as a reason; ``None`` when all are there."""
    import ast
    import importlib.util
    import inspect

    for ref in test.get("imports") or []:
        # read, not imported: a module whose own imports need a GPU package still ships
        mod_name, _, name = ref.partition(":")
        try:
            spec = importlib.util.find_spec(mod_name)
        except ImportError:
            spec = None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return f"the release ships no {mod_name}"
        if name and name not in _top_level_names(ast.parse(open(spec.origin, encoding="utf-8").read())):
            return f"the release's {mod_name} has no {name}"
    reg = test.get("register")
    if reg is not None:
        try:
            from sglang.test.ci.ci_register import register_cuda_ci
        except ImportError:
            return "the release ships no sglang.test.ci.ci_register"
        try:
            inspect.signature(register_cuda_ci).bind(**reg)
        except TypeError as e:
            return f"the release's register_cuda_ci refuses {sorted(reg)}: {e}"
    return None


def build(test: dict, parser) -> dict:
    import sglang.test.test_utils as tu

    out = {"name": test["name"], "applies": False}
    mod, base, why = _base(test.get("base_class", "PDDisaggregationServerBase"))
    if base is None:
        out["why"] = why
        return out
    why = _missing_imports(test)
    if why:
        out["why"] = why
        return out
    for ref in test.get("requires") or []:
        # a helper of the base's module or an attribute of the base class the test uses
        if not hasattr(mod, ref) and not hasattr(base, ref):
            out["why"] = f"the release's {mod.__name__} has no {ref}"
            return out
    model = test["model"]
    if "/" not in model:
        if not hasattr(tu, model):
            out["why"] = f"the release's test_utils has no {model}"
            return out
        model = getattr(tu, model)
    draft = None
    if test.get("draft"):
        if not hasattr(tu, test["draft"]):
            out["why"] = f"the release's test_utils has no {test['draft']}"
            return out
        draft = getattr(tu, test["draft"])
    out.update(model=model, draft=draft)
    recorded: dict[str, dict] = {}

    def record(model_path, url, timeout=None, other_args=(), env=None, **kw):
        role = "prefill" if "prefill" in list(other_args) else "decode"
        recorded[role] = {"argv": [str(a) for a in other_args], "env": dict(env or {})}

        class _P:
            pid = 0

        return _P()

    attrs = {"model": model}
    for key, val in (test.get("base") or {}).items():
        if not hasattr(base, key):
            out["why"] = f"the release's {base.__name__} has no {key} (the test sets it)"
            return out
        attrs[key] = shlex.split(val.replace("{draft}", str(draft))) if isinstance(val, str) else val
    cls = type("Rebuilt", (base,), attrs)
    orig = getattr(mod, "popen_launch_pd_server", None)
    mod.popen_launch_pd_server = record
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            base.setUpClass.__func__(cls)
        cls.model = model
        if test.get("backend"):
            cls.transfer_backend = ["--disaggregation-transfer-backend", test["backend"]]
        for key, val in (test.get("after_setup") or {}).items():
            # what the test's setUpClass sets after the base's (e.g. bootstrap_port: "@prefill_port")
            setattr(cls, key, getattr(cls, val[1:]) if isinstance(val, str) and val.startswith("@") else val)
        if "base" in test:
            if test.get("ib") == "none":
                cls.rdma_devices = []  # configure_nixl_pd_backend: no Mooncake device lists
            for role in ("prefill", "decode"):
                fn = getattr(cls, f"start_{role}", None)
                if fn is None:
                    out["why"] = f"the release's {base.__name__} has no start_{role}"
                    return out
                with contextlib.redirect_stdout(io.StringIO()):
                    fn()
        else:
            ib = test.get("ib", "rdma_devices")
            for k, role in enumerate(("prefill", "decode")):
                argv = ["--trust-remote-code", "--disaggregation-mode", role]
                if not test.get("no_bootstrap_port"):
                    if not hasattr(cls, "bootstrap_port"):
                        out["why"] = (
                            f"the test passes cls.bootstrap_port, which the release's {base.__name__} does not set"
                        )
                        return out
                    argv += ["--disaggregation-bootstrap-port", cls.bootstrap_port]
                argv += shlex.split(test["own"][role].replace("{draft}", str(draft)))
                argv += list(cls.transfer_backend)
                if ib == "rdma_devices":
                    argv += list(cls.rdma_devices)
                elif isinstance(ib, dict):
                    if not hasattr(cls, "rdma_devices_for"):
                        out["why"] = f"the release's {base.__name__} has no rdma_devices_for"
                        return out
                    argv += list(cls.rdma_devices_for(ib["rdma_devices_for"][k]))
                recorded[role] = {"argv": [str(a) for a in argv], "env": {}}
    finally:
        if orig is not None:
            mod.popen_launch_pd_server = orig
    for role in ("prefill", "decode"):
        rec = recorded.get(role)
        if rec is None:
            out["why"] = f"the base class launched no {role}"
            return out
        rec["env"] = {**rec["env"], **(test.get("env") or {}), **(test.get(f"env_{role}") or {})}
        refused = _refused(parser, ["--model-path", model, *rec["argv"]])
        if refused:
            out["why"] = f"the release's ServerArgs refuses the {role}'s argv: {refused}"
            return out
        out[role] = rec
    out["applies"] = True
    return out


def main() -> None:
    tests = json.load(open(sys.argv[1]))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        # kvcheck's own tolerance of configs two packages register under one name (what the
        # runtime kernel does before importing SGLang: 0.5.19 and transformers both define qwen3_asr)
        from kvcheck.sglang.runtime_kernel import _tolerate_reregistered_configs

        _tolerate_reregistered_configs()
        import sglang

        parser = _parser()
    release = getattr(sglang, "__version__", None)
    results = []
    for t in tests:
        try:
            r = build(t, parser)
        except Exception as e:  # a base class this recorder cannot drive: said, not hidden
            r = {
                "name": t["name"],
                "applies": False,
                "why": f"the base class could not be driven: {type(e).__name__}: {e}",
            }
        r["release"] = release
        results.append(r)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
