"""The hostile-input suite: generated inputs (hypothesis) through every reader, in this
process, each bounded in time, with 0 tracebacks, 0 leaks, 0 reads outside the root.

Readers: ``-f`` deployment files (scripts, Kubernetes manifests, srt-slurm recipes;
read and checked by the cluster pipeline), ``--prefill FILE`` launch lines with
``--config``, ``--env`` files, model ``config.json``, live ``/server_info`` bodies (strict
JSON, redaction, typing), NIXL metadata blobs, and ``explain`` logs. About 1,100 inputs in
all (``EXAMPLES`` per reader), seeded (``derandomize``) so CI is repeatable; each input may
raise only kvcheck's own errors (exit 2/3/4), never anything else; every message, as the
CLI would print it (scrubbed and escaped), holds no planted secret and no escape byte.

File reads are watched with an audit hook (``sys.addaudithook``, ``open`` events): a read
of the planted file outside the root fails the test. Inputs that once failed are kept
under ``tests/data/hostile/`` and replayed first.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcheck.errors import KvcheckError
from kvcheck.sources.limits import escape_terminal
from kvcheck.sources.redact import scrub_output

EXAMPLES = int(os.environ.get("KVCHECK_FUZZ_EXAMPLES", "160"))  # x 7 readers
DEADLINE_S = 5.0  # CPU seconds of the calling thread per input (typical: milliseconds); CPU, not wall
# time, so that other processes on a loaded CI machine do not count: a blow-up (regex backtracking,
# quadratic parsing) costs CPU wherever it runs
DATA = Path(__file__).parent / "data" / "hostile"
SECRET = "sk_live_FUZZCANARY0123456789"
OUTSIDE = Path("/tmp/kvcheck-fuzz-outside")  # the file no input may get read

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

_OPENED: list[str] = []
_WATCH = {"on": False}


def _audit(event, args):
    if _WATCH["on"] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@pytest.fixture(scope="module", autouse=True)
def outside_file():
    OUTSIDE.mkdir(exist_ok=True)
    (OUTSIDE / "secret.yaml").write_text(f"api-key: {SECRET}\npage-size: {SECRET}\n")
    (OUTSIDE / "config.json").write_text(json.dumps({"num_hidden_layers": SECRET}))
    yield


@pytest.fixture(autouse=True)
def _clean():
    from kvcheck.sources.redact import clear_registry

    clear_registry()
    yield
    clear_registry()


def _judge(fn, *, secret: str = SECRET) -> None:
    """Run one reader call: only kvcheck's errors, in time, nothing leaked or read outside."""
    from kvcheck.sources.redact import register_secrets

    register_secrets([secret])  # as the CLI registers what it finds: the scrub must hold it
    _OPENED.clear()
    _WATCH["on"] = True
    t0 = time.thread_time()
    message = ""
    try:
        fn()
    except KvcheckError as exc:
        message = str(exc)
    finally:
        _WATCH["on"] = False
    took = time.thread_time() - t0
    assert took < DEADLINE_S, took
    shown = escape_terminal(scrub_output(message))
    assert secret not in shown
    assert "\x1b" not in shown and "\u202e" not in shown
    assert not [p for p in _OPENED if str(OUTSIDE) in os.path.realpath(p)], _OPENED


# -- building blocks -----------------------------------------------------------------

NASTY = st.sampled_from([
    "\x1b[2J", "\x1b]0;title\x07", "\x1b]0;unterminated", "\u202e", "\x00", "\r", "${A:-${A:-x}}", "$(id)", "`id`", "'", '"', "\\",
    "--api-key " + SECRET, f"--api-ke {SECRET}", f"--hf-tokn {SECRET}", f"https://{SECRET}@h/x", f"?token={SECRET}",
    f"--config {OUTSIDE}/secret.yaml", "--config ../../../../../tmp/kvcheck-fuzz-outside/secret.yaml", f"--model-path {OUTSIDE}",
    "--page-size NaN", "--tp-size 1000000000000", "--page-size -1", "🙂", "\ud7ff", "*a", "&a", "{", "[", "---", ":", "- ",
])
FLAGS = st.sampled_from(["--model-path", "--page-size", "--tp-size", "--disaggregation-mode", "--disaggregation-transfer-backend",
                         "--kv-cache-dtype", "--dp-size", "--enable-dp-attention", "--port", "--config", "--api-key", "--nnodes"])
VALUES = st.one_of(st.sampled_from(["prefill", "decode", "nixl", "mooncake", "16", "64", "1", "0", "fp8_e4m3", "meta-llama/Llama-3.1-8B", "true"]),
                   st.integers(-2**70, 2**70).map(str), NASTY, st.text(max_size=12))
WORD = st.one_of(FLAGS, VALUES, NASTY)
LAUNCH = st.lists(WORD, max_size=14).map(lambda ws: "python -m sglang.launch_server " + " ".join(ws))
BIG = st.one_of(st.integers(-3, 5), st.just(10**12), st.just(10**9), st.integers(0, 2**63), st.text(max_size=5), st.none(), st.just([1, 2]))


def _recipe(res: dict, sweep: dict | None, p_cfg: dict) -> dict:
    doc = {"name": "fz", "model": {"path": "hf:meta-llama/Llama-3.1-8B"}, "resources": res,
           "backend": {"type": "sglang", "sglang_config": {"prefill": p_cfg, "decode": {"disaggregation-transfer-backend": "nixl"}}}}
    if sweep is not None:
        doc["sweep"] = sweep
    return doc


RECIPES = st.builds(
    _recipe,
    st.fixed_dictionaries({}, optional={k: BIG for k in ("prefill_nodes", "decode_nodes", "prefill_workers", "decode_workers", "gpus_per_node", "gpus_per_prefill")}),
    st.one_of(st.none(), st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), st.lists(st.integers(0, 9), max_size=40), max_size=12)),
    st.dictionaries(st.sampled_from(["page-size", "api-key", "tp-size", "mem-fraction-static", "config", "model-path"]), st.one_of(VALUES, st.integers(), st.lists(VALUES, max_size=3)), max_size=4),
)


def _k8s(kind: str, replicas, size, args: list[str], containers: int) -> dict:
    cmd = ["python3", "-m", "sglang.launch_server", *args]
    pod = {"spec": {"containers": [{"name": f"c{i}", "image": "lmsysorg/sglang:v0.5.23\x1b]0;x", "command": cmd} for i in range(containers)]}}
    if kind == "LeaderWorkerSet":
        spec = {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "leaderTemplate": pod, "workerTemplate": pod}}
    else:
        spec = {"replicas": replicas, "template": pod}
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": "fz"}, "spec": spec}


MANIFESTS = st.builds(_k8s, st.sampled_from(["LeaderWorkerSet", "Deployment", "StatefulSet"]), BIG, BIG, st.lists(st.one_of(FLAGS, VALUES), max_size=10), st.integers(0, 4))


def _write(tmp: Path, name: str, data: str | bytes) -> Path:
    p = tmp / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return p


def _yaml(doc) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _read_and_check(path: Path) -> None:
    from kvcheck.cluster import ClusterOptions, check_deployments
    from kvcheck.sources.deployments import read_deployments

    deps = read_deployments([path])
    check_deployments(deps, ClusterOptions(kernel="builtin"))


# -- the readers ---------------------------------------------------------------------


@FUZZ
@given(st.lists(st.one_of(LAUNCH, NASTY, st.text(max_size=40)), min_size=1, max_size=6))
def test_fuzz_launch_scripts(tmp_path_factory, lines):
    d = tmp_path_factory.mktemp("s")
    path = _write(d, "deploy.sh", "\n".join(lines) + "\n")
    _judge(lambda: _read_and_check(path))


@FUZZ
@given(st.one_of(RECIPES, MANIFESTS))
def test_fuzz_manifests_and_recipes(tmp_path_factory, doc):
    d = tmp_path_factory.mktemp("m")
    path = _write(d, "deploy.yaml", _yaml(doc))
    _judge(lambda: _read_and_check(path))


@FUZZ
@given(st.lists(WORD, max_size=12), st.one_of(st.none(), st.dictionaries(st.one_of(FLAGS.map(lambda f: f[2:]), st.text(max_size=8)), VALUES, max_size=5)))
def test_fuzz_pair_launch_line_with_config(tmp_path_factory, words, config):
    from kvcheck.sources import load_side

    d = tmp_path_factory.mktemp("p")
    extra = []
    if config is not None:
        _write(d, "cfg.yaml", _yaml(config))
        extra = ["--config", "cfg.yaml"]
    path = _write(d, "prefill.sh", "python -m sglang.launch_server --disaggregation-mode prefill " + " ".join(words + extra) + "\n")
    from kvcheck.sources.files import set_read_root

    set_read_root(d)  # --root: a pair's model-path is confined too (without it, read as named; SECURITY.md)
    try:
        _judge(lambda: load_side(str(path), "prefill"))
    finally:
        set_read_root(None)


@FUZZ
@given(st.lists(st.one_of(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["SGLANG_X", "UCX_TLS", "export A", "HF_TOKEN", "1BAD", ""]), VALUES),
                          NASTY, st.text(max_size=30)), max_size=10), st.sampled_from([".env", ".yaml", ".json"]))
def test_fuzz_env_files(tmp_path_factory, lines, suffix):
    from kvcheck.sources.files import read_env_file

    d = tmp_path_factory.mktemp("e")
    path = _write(d, "x" + suffix, "\n".join(lines))
    _judge(lambda: read_env_file(path))


JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**80, 2**80), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10), NASTY),
                       lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)), max_leaves=20)
MODEL_KEYS = st.sampled_from(["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "kv_lora_rank",
                              "torch_dtype", "architectures", "model_type", "text_config", "qk_rope_head_dim", "sliding_window"])


@FUZZ
@given(st.dictionaries(MODEL_KEYS, JSONISH, max_size=8), st.booleans())
def test_fuzz_model_config_json(tmp_path_factory, cfg, as_dir):
    from kvcheck.sources import read_model_file

    d = tmp_path_factory.mktemp("c")
    try:
        text = json.dumps({"architectures": ["LlamaForCausalLM"], **cfg})
    except ValueError:
        text = "{"
    _write(d, "config.json", text)
    _judge(lambda: read_model_file(d if as_dir else d / "config.json"))


SERVER_KEYS = st.sampled_from(["model_path", "page_size", "tp_size", "disaggregation_mode", "disaggregation_transfer_backend", "kv_cache_dtype",
                               "api_key", "db_pass", "launch_command", "version", "served_model_name", "dp_size"])


@FUZZ
@given(st.dictionaries(SERVER_KEYS, JSONISH, max_size=8), st.sampled_from(["", "NaN", "Infinity", "1e400", "dup", "surrogate"]))
def test_fuzz_server_info(cfg, poison):
    from kvcheck.sources.limits import StrictJSONError, strict_json_loads
    from kvcheck.sources.live import server_args_from_info, _mistyped_fields
    from kvcheck.sources.redact import redact

    info = {"disaggregation_mode": "decode", **cfg, "launch_command": f"sglang serve --api-ke {SECRET}", "db_pass": SECRET}
    try:
        text = json.dumps(info)
    except ValueError:
        text = "{}"
    text = {"": text, "NaN": text[:-1] + ', "n": NaN}', "Infinity": text[:-1] + ', "n": Infinity}', "1e400": text[:-1] + ', "n": 1e400}',
            "dup": text[:-1] + ', "page_size": 1}', "surrogate": text[:-1] + ', "s": "\\udc00"}'}[poison]

    def run():
        try:
            data = strict_json_loads(text)
        except (StrictJSONError, json.JSONDecodeError):
            return
        safe = redact(data)
        assert SECRET not in json.dumps(safe)
        _mistyped_fields(data)
        server_args_from_info(data, "http://x")

    _judge(run)


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.builds(lambda a, b: a + b, st.sampled_from([b"", b"NIXL", b"\x00" * 8, b"\xff" * 8]), st.binary(max_size=200))))
def test_fuzz_nixl_blobs(blob):
    from kvcheck.nixl.blob import parse_metadata

    _judge(lambda: parse_metadata(blob, source="fuzz"))


LOG_LINES = st.one_of(NASTY, st.text(max_size=60), st.sampled_from([
    "ValueError: NIXL KV transfer has no KV memory segments", "RuntimeError: NIXL_ERR_BACKEND", "sglang 0.5.8", "Traceback (most recent call last):",
    "x" * 20000]))


@FUZZ
@given(st.lists(LOG_LINES, max_size=20))
def test_fuzz_explain_logs(tmp_path_factory, lines):
    from kvcheck.explain.matcher import VersionSniffer, explain_blocks, iter_log_blocks
    from kvcheck.sources.files import open_regular

    d = tmp_path_factory.mktemp("l")
    path = _write(d, "server.log", "\n".join(lines))

    def run():
        with open_regular(path) as fh:
            explain_blocks(VersionSniffer(iter_log_blocks(fh)), source="log")

    _judge(run)


def test_kept_regression_inputs_replay():
    """Every input that once broke a reader, kept as a file, read again."""
    files = sorted(DATA.glob("*"))
    assert files
    for f in files:
        _judge(lambda: _read_and_check(f))


def _resident_mb() -> float:
    """This process's resident memory now, MiB (``/proc/self/statm``: pages)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


@pytest.fixture(scope="module", autouse=True)
def _memory_at_start():
    """The resident memory when this file's first input runs: what the worker already holds
    (torch and SGLang imported by other files, the format indexes), not this file's inputs."""
    return _resident_mb()


def test_the_inputs_stay_under_1_gib(_memory_at_start):
    """The hostile inputs of this file add less than 1 GiB to the process: its peak resident
    memory (``ru_maxrss``, KiB) less what it held when the file started. The process's whole
    peak depends on which other test files the same xdist worker ran first."""
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mb - _memory_at_start < 1024, (peak_mb, _memory_at_start)
