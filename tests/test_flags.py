"""kvcheck.sglang.flags against SGLang 0.5.23's own parser.

Tests marked ``runtime`` import the installed SGLang and compare, value for value, with
the parser ``prepare_server_args`` builds and with ``ConfigArgumentMerger``; the others
pin behaviour read from that runtime so they run without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kvcheck.errors import InputError
from kvcheck.sglang import flags as F
from kvcheck.sglang.flags import Flag, FlagTable

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "kvcheck" / "sglang" / "flagstore"


@pytest.fixture(scope="module")
def table() -> FlagTable:
    return FlagTable.load("0.5.23")


# ---------------------------------------------------------------------------------------
# without the runtime
# ---------------------------------------------------------------------------------------


def test_counts(table):
    assert len(table) == 532  # argparse actions, -h/--help included
    assert len(table.dests) == 531  # --monokernel-backend shares enable_amd_monokernel
    assert len(table.option_strings) == 561
    assert table.meta["count"] == {"actions": 532, "dests": 531, "option_strings": 561}
    assert [f.name for f in table] == sorted(f.name for f in table)


def test_load_is_cached_and_cold_start_is_light():
    assert FlagTable.load() is FlagTable.load("0.5.23")
    code = (
        "import sys; from kvcheck.sglang import flags; flags.FlagTable.load();"
        "bad=[m for m in ('sglang','torch','nixl','nixl_cu12','yaml','pydantic') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_unknown_version():
    with pytest.raises(InputError):
        FlagTable.load("0.0.1")


def test_flag_fields(table):
    tp = table.resolve("tp-size")
    assert isinstance(tp, Flag)
    assert tp.dest == "tp_size" and tp.type == "int" and tp.action == "store" and tp.default == 1
    assert tp.aliases == ("tensor-parallel-size",)
    assert tp.option_strings == ("--tp-size", "--tensor-parallel-size")
    ep = table.resolve("ep-size")
    assert ep.option_strings == ("--ep-size", "--expert-parallel-size", "--ep")
    kv = table.resolve("kv-cache-dtype")
    assert kv.default == "auto" and "bf16" in kv.choices and "bfloat16" in kv.choices
    assert table.resolve("disaggregation-transfer-backend").default == "mooncake"
    assert table.resolve("disaggregation-bootstrap-port").default == 8998
    assert table.resolve("page-size").default is None
    mp = table.resolve("model-path")
    assert mp.required and mp.aliases == ("model",)


@pytest.mark.parametrize(
    "token,name",
    [
        ("--tp-size", "tp-size"),
        ("tp-size", "tp-size"),
        ("tp", "tp-size"),
        ("--tp", "tp-size"),
        ("tp_size", "tp-size"),
        ("tensor-parallel-size", "tp-size"),
        ("tensor_parallel", "tp-size"),
        ("ep", "ep-size"),  # exact alias beats being a prefix of --ep-size
        ("model", "model-path"),
        ("page-size", "page-size"),
        ("--page-size=64", "page-size"),
        ("disaggregation-mode", "disaggregation-mode"),
        ("enable-dp-attention", "enable-dp-attention"),
        ("no-enable-tf32-matmul", "enable-tf32-matmul"),
        ("-h", "help"),
        ("enable-hicache", "enable-hierarchical-cache"),
    ],
)
def test_resolve(table, token, name):
    assert table.resolve(token).name == name


def test_resolve_underscores_strict(table):
    with pytest.raises(InputError, match=r"unrecognized arguments: --tp_size; did you mean --tp-size\?"):
        table.resolve("tp_size", underscores=False)


def test_resolve_misspelled(table):
    with pytest.raises(InputError, match=r"unrecognized arguments: --page-sise; did you mean --page-size\?") as e:
        table.resolve("--page-sise")
    assert e.value.exit_code == 2


def test_resolve_ambiguous(table):
    with pytest.raises(
        InputError,
        match=r"ambiguous option: --enable-hi could match --enable-hierarchical-cache, --enable-hicache, --enable-hisparse",
    ):
        table.resolve("enable-hi")
    with pytest.raises(InputError, match=r"ambiguous option: --page could match --page-size, "):
        table.resolve("page")


def test_defaults(table):
    d = table.defaults()
    assert d["tp_size"] == 1 and d["page_size"] is None and d["kv_cache_dtype"] == "auto"
    assert d["enable_dp_attention"] is False and d["enable_amd_monokernel"] is False
    assert "help" not in d and d["model_path"] is None
    assert len(d) == 530
    d["tp_size"] = 9
    assert table.defaults()["tp_size"] == 1


def test_parse_argv_basic(table):
    got = table.parse_argv(
        ["--model", "m", "--tp", "2", "--page-size=64", "--enable-dp-attention", "--dp", "2",
         "--kv-cache-dtype", "fp8_e4m3", "--cuda-graph-bs-decode", "1", "2", "4",
         "--no-enable-tf32-matmul", "--context-length", "32k", "--monokernel-backend", "amd"],
        "cmd",
    )
    assert got == {
        "model_path": "m", "tp_size": 2, "page_size": 64, "enable_dp_attention": True, "dp_size": 2,
        "kv_cache_dtype": "fp8_e4m3", "cuda_graph_bs_decode": [1, 2, 4], "enable_tf32_matmul": False,
        "context_length": 32000, "enable_amd_monokernel": True,
    }


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["--page-sise", "4"], r"unrecognized arguments: --page-sise 4; did you mean --page-size\?"),
        (["--tp-size", "x"], r"argument --tp-size/--tensor-parallel-size: invalid int value: 'x'"),
        (["--tp-size"], r"argument --tp-size/--tensor-parallel-size: expected one argument"),
        (["--kv-cache-dtype", "bf"], r"invalid choice: 'bf' \(choose from 'auto', "),
        (["--enable-hisparse=1"], r"argument --enable-hisparse: ignored explicit argument '1'"),
        (["--enable-hi"], r"ambiguous option: --enable-hi could match"),
        (["--model-path"], r"expected one argument"),
        (["--help"], r"help"),
    ],
)
def test_parse_argv_errors(table, argv, pattern):
    with pytest.raises(InputError, match=pattern):
        table.parse_argv(argv, "cmd")


def test_parse_argv_required_and_defaults(table):
    with pytest.raises(InputError, match="the following arguments are required: --model-path/--model"):
        table.parse_argv(["--tp", "2"], check_required=True)
    full = table.parse_argv(["--model-path", "m"], with_defaults=True)
    assert full["model_path"] == "m" and full["tp_size"] == 1


def test_coerce(table):
    ps = table.resolve("page-size")
    assert table.coerce(ps, 64, "y") == 64
    assert table.coerce(ps, "64", origin="argv") == 64
    assert table.coerce(ps, 64, origin="json") == 64
    assert table.coerce(ps, None, origin="json") is None
    with pytest.raises(InputError, match=r"invalid int value: '1.5'"):
        table.coerce(ps, 1.5, "y")
    with pytest.raises(InputError, match=r"invalid int value: 'None'"):
        table.coerce(ps, None, "y")  # YAML null is passed on as the string None
    hs = table.resolve("enable-hisparse")
    assert table.coerce(hs, True) is True and table.coerce(hs, False) is False
    with pytest.raises(InputError):
        table.coerce(hs, "yes", origin="json")
    kv = table.resolve("kv-cache-dtype")
    with pytest.raises(InputError, match=r"--kv-cache-dtype: invalid choice: 'bf'.*'bf16'"):
        table.coerce(kv, "bf")
    assert table.coerce("mem-fraction-static", 1, origin="config") == 1.0
    assert table.coerce("context-length", "128Ki", origin="argv") == 131072


def test_config_mapping(table):
    assert table.parse_config({"tp": 2, "enable-hisparse": True, "disable-radix-cache": False}) == {
        "tp_size": 2, "enable_hisparse": True,
    }
    with pytest.raises(InputError, match="unrecognized arguments: --tp_size 2"):
        table.parse_config({"tp_size": 2})
    with pytest.raises(InputError, match="Unsupported config option 'enable_dp_attention' with action 'DeprecatedStoreTrueAction'"):
        table.parse_config({"enable-dp-attention": True})
    with pytest.raises(InputError, match="Unsupported config option 'enable_tf32_matmul' with action 'BooleanOptionalAction'"):
        table.parse_config({"enable-tf32-matmul": True})
    # an abbreviated store_true key is not recognised as boolean by the merger: "true" is left over
    with pytest.raises(InputError, match="unrecognized arguments: true"):
        table.parse_config({"enable-hisp": True})


def test_merge_config(table):
    argv = ["--tp", "4", "--config", "c.yaml", "--page-size", "32"]
    assert F.config_path(argv) == "c.yaml"
    got = table.parse_argv(argv, config={"tp-size": 2, "page-size": 64, "dp-size": 2})
    assert got == {"tp_size": 4, "page_size": 32, "dp_size": 2}
    # --config=FILE does not trigger SGLang's merge: the file is stored and ignored
    assert F.config_path(["--config=c.yaml"]) is None
    assert table.parse_argv(["--config=c.yaml"], config={"tp": 2}) == {"config": "c.yaml"}
    with pytest.raises(InputError, match="Multiple config files"):
        F.config_path(["--config", "a.yaml", "--config", "b.yaml"])
    with pytest.raises(InputError, match="No config file specified"):
        F.config_path(["--config"])


# ---------------------------------------------------------------------------------------
# against the installed runtime
# ---------------------------------------------------------------------------------------


class _ParserError(Exception):
    pass


@pytest.fixture(scope="module")
def gen():
    pytest.importorskip("sglang")
    spec = importlib.util.spec_from_file_location("kvcheck_gen_flags", ROOT / "scripts" / "gen_flags.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def parser(gen) -> argparse.ArgumentParser:
    p = gen.build_parser()

    def error(message):  # argparse calls this instead of raising
        raise _ParserError(message)

    p.error = error
    return p


def _sglang_parse(parser, argv):
    """(full namespace dict, None) or (None, error message)."""
    try:
        return vars(parser.parse_args(argv)), None
    except _ParserError as e:
        return None, str(e)


def _assert_same(ours, real, parser):
    """Our dests-that-were-set agree with the runtime namespace, and cover every change."""
    base = vars(parser.parse_args(["--model-path", "__unset__"]))
    for k, v in ours.items():
        assert real[k] == v, (k, v, real[k])
    changed = {k for k, v in real.items() if k == "model_path" or v != base[k]}
    assert changed <= set(ours), changed - set(ours)


def _ours(table, argv):
    try:
        got = table.parse_argv(argv)
    except InputError as e:
        return None, str(e)
    return got, None


@pytest.mark.runtime
def test_regenerated_table_matches_committed(gen):
    """The installed release's table, regenerated from its own parser, is byte for byte
    the one rebuilt from the store (what ``scripts/gen_flags.py --check`` does)."""
    assert gen.render(gen.generate("0.5.23")) == gen.render(gen.stored("0.5.23")), "run scripts/gen_flags.py"


@pytest.mark.runtime
def test_same_flags_as_runtime(parser, table):
    assert len(parser._actions) == len(table) == 532
    assert list(parser._option_string_actions) == list(table.option_strings)
    assert {a.dest for a in parser._actions} == set(table.dests)
    for action in parser._actions:
        flag = table.get(action.option_strings[0])
        assert flag.option_strings == tuple(action.option_strings)
        assert flag.dest == action.dest
        assert flag.required == action.required
        if action.default is not argparse.SUPPRESS:
            assert flag.default == action.default, flag.name
        if action.choices is None:
            assert flag.choices is None
        else:
            assert set(flag.choices) == set(action.choices), flag.name
        if flag.takes_value:
            assert flag.nargs == action.nargs, flag.name
        else:
            assert action.nargs == 0
        aliases = [o.lstrip("-") for o in action.option_strings if o.lstrip("-") != flag.name]
        assert list(flag.aliases) == aliases


@pytest.mark.runtime
def test_defaults_equal_runtime(parser, table):
    ns = vars(parser.parse_args(["--model-path", "x"]))
    ours = table.defaults()
    ns["model_path"] = None
    assert ours == ns


def _tokens(table, seed=0):
    rng = random.Random(seed)
    toks = set()
    for opt in table.option_strings:
        if not opt.startswith("--"):
            continue
        for i in range(3, len(opt) + 1):
            toks.add(opt[:i])
        toks.add(opt.replace("-", "_")[:2] + opt[2:].replace("-", "_"))
        s = list(opt[2:])
        if len(s) > 3:
            j = rng.randrange(len(s))
            s[j] = rng.choice("abcdefghijklmnopqrstuvwxyz-")
            toks.add("--" + "".join(s))
    toks.update(["-h", "--", "-x", "--x", "--enable", "--no", "--no-"])
    return sorted(toks)


@pytest.mark.runtime
def test_resolve_matches_argparse_for_every_prefix(parser, table):
    """Every prefix, underscore spelling and one-letter typo of every option string."""
    n = 0
    for tok in _tokens(table):
        try:
            real = parser._parse_optional(tok)
            real_err = None
        except _ParserError as e:
            real, real_err = None, str(e)
        try:
            ours = table.resolve(tok, underscores=False)
            our_err = None
        except InputError as e:
            ours, our_err = None, str(e)
        if real_err is not None:
            assert our_err is not None and real_err in our_err, tok
        elif real is None or real[0] is None:
            assert ours is None, tok
            assert "unrecognized arguments" in our_err
        else:
            assert ours is not None and ours.dest == real[0].dest, tok
            assert real[1] in ours.option_strings
        n += 1
    assert n > 9000


@pytest.mark.runtime
@pytest.mark.parametrize(
    "token",
    ["tp", "tp_size", "tensor_parallel_size", "model", "page_size", "dp", "ep", "enable_dp_attention",
     "disaggregation_transfer_backend", "kv-cache", "chunked-prefill", "speculative-algo"],
)
def test_resolve_lenient_gives_the_dest_of_the_dash_form(parser, table, token):
    dash = "--" + token.replace("_", "-")
    real = parser._parse_optional(dash)
    assert table.resolve(token).dest == real[0].dest


@pytest.mark.runtime
@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "m", "--tp", "2", "--page-size=64", "--dp", "2", "--enable-dp-attention"],
        ["--model-path", "m", "--attn-dp", "4", "--kv-cache-dtype", "bf16", "--disaggregation-mode", "decode"],
        ["--model-path", "m", "--cuda-graph-bs-decode", "1", "2", "8", "--page-size", "32"],
        ["--model-path", "m", "--cuda-graph-bs-decode", "--page-size", "32"],
        ["--model-path", "m", "--lora-target-modules", "--tp", "2"],
        ["--model-path", "m", "--lora-paths", "a", '{"lora_name":"x","lora_path":"y"}'],
        ["--model-path", "m", "--model-checksum", "--tp", "2"],
        ["--model-path", "m", "--model-checksum", "abc"],
        ["--model-path", "m", "--no-enable-tf32-matmul", "--enable-tf32-matmul"],
        ["--model-path", "m", "--monokernel-backend", "amd"],
        ["--model-path", "m", "--monokernel-backend", "nvidia"],
        ["--model-path", "m", "--context-length", "128Ki", "--max-total-tokens", "1.5k"],
        ["--model-path", "m", "--context-length", "1.5Ki"],
        ["--model-path", "m", "--mem-fraction-static", "0.8", "--random-seed", "-3"],
        ["--model-path", "m", "--tp-size", "x"],
        ["--model-path", "m", "--tp-size"],
        ["--model-path", "m", "--page-sise", "4"],
        ["--model-path", "m", "stray"],
        ["--model-path", "m", "--enable-hisparse=yes"],
        ["--model-path", "m", "--enable-hi"],
        ["--model-path", "m", "--kv-cache-dtype=fp8"],
        ["--model-path", "m", "--cuda-graph-backend-decode", "tc_piecewise"],
        ["--model-path", "m", "--cuda-graph-config", '{"decode": {"backend": "full"}}'],
        ["--model-path", "m", "--cuda-graph-config", '{"middle": {}}'],
        ["--model-path", "m", "--json-model-override-args", '{"a": 1}', "--quantization-param-path", "None"],
        ["--model-path", "m", "--preferred-sampling-params", "{bad"],
        ["--model-path", "m", "--forward-hooks", "[1, 2]"],
        ["--model-path", "m", "--config=x.yaml"],
        ["--model-path", "m", "--tp", "2", "--tp", "4"],
        ["--model-path", "m", "--ep", "8"],
    ],
)
def test_parse_argv_matches_runtime(parser, table, argv):
    real, real_err = _sglang_parse(parser, argv)
    ours, our_err = _ours(table, argv)
    if real_err is not None:
        assert our_err is not None and real_err in our_err, (real_err, our_err)
    else:
        assert our_err is None, our_err
        _assert_same(ours, real, parser)


@pytest.mark.runtime
def test_config_key_sets_match_runtime(parser, table):
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    m = ConfigArgumentMerger(parser)
    store_true, unsupported = table._config_key_sets()
    assert set(m.store_true_actions) == set(store_true)
    assert set(m.unsupported_actions) == set(unsupported)
    for key, action in m.unsupported_actions.items():
        assert tuple(action.option_strings) == unsupported[key].option_strings


@pytest.mark.runtime
@pytest.mark.parametrize(
    "config,cli",
    [
        ({"tp": 2, "page-size": 64}, []),
        ({"tp-size": 2, "dp": 2, "enable-dp-lm-head": True, "disable-radix-cache": False}, ["--tp", "4"]),
        ({"tp_size": 2}, []),
        ({"page-size": None}, []),
        ({"page-size": 1.0}, []),
        ({"mem-fraction-static": 1}, []),
        ({"kv-cache-dtype": "bf"}, []),
        ({"enable-dp-attention": True}, []),
        ({"enable-tf32-matmul": False}, []),
        ({"lora-paths": ["a"]}, []),
        ({"enable-hisp": True}, []),
        ({"cuda-graph-bs-decode": [1, 2, 4], "json-model-override-args": {"a": 1}}, []),
        ({"cuda-graph-bs-decode": []}, []),
        ({"disaggregation-decode-enable-radix-cache": "true"}, []),
        ({"trust-remote-code": True, "served-model-name": True}, []),
        ({"monokernel-backend": "amd"}, []),
        ({"ep": 4, "model": "other"}, ["--model-path", "m"]),
    ],
)
def test_config_matches_runtime(parser, table, tmp_path, config, cli):
    import yaml
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = yaml.safe_load(path.read_text())
    argv = ["--model-path", "m", "--config", str(path), *cli]
    try:
        merged = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        real, real_err = _sglang_parse(parser, merged)
    except ValueError as e:
        real, real_err = None, str(e)
    try:
        ours, our_err = table.parse_argv(argv, config=loaded), None
    except InputError as e:
        ours, our_err = None, str(e)
    if real_err is not None:
        assert our_err is not None and real_err in our_err, (real_err, our_err)
    else:
        assert our_err is None, our_err
        _assert_same(ours, real, parser)


@pytest.mark.runtime
def test_enable_dp_attention_is_still_accepted(parser, table):
    ns = parser.parse_args(["--model-path", "m", "--enable-dp-attention", "--dp", "2"])
    assert ns.enable_dp_attention is True and ns.dp_size == 2
    flag = table.resolve("enable-dp-attention")
    assert flag.action == "deprecated_store_true" and flag.deprecated == "--attn-dp-size <dp-size>"


def test_table_file_is_valid_json():
    data = json.loads((STORE / "r" / "0.5.23.json").read_text())
    assert data["sglang_version"] == "0.5.23"
    assert data["parser"]["allow_abbrev"] is True
    assert data["config_merger"] == "v0.5.23"
    lines = (STORE / "entries.jsonl").read_text().splitlines()
    assert all(json.loads(line)["name"] for line in lines)
