"""CONTRIBUTING.md's four recipes, each followed once, as written, in a copy of kvcheck.

Each test copies ``kvcheck/`` (and the scripts a recipe runs) into a temporary tree,
asserts what kvcheck says there *before* the recipe (the new thing is unknown: unchecked,
refused or absent), follows the recipe's steps one by one in that copy, and asserts what
kvcheck says after. A step left out keeps the old answer (the test of the release recipe
stops after steps 1-2 once to show it). The copy is run in a subprocess with
``PYTHONPATH`` pointing at it, so the repository itself is never touched.

Files each recipe touches (the recipe's own list, counted here):
- add a release: 6 (flag store ``r/<release>.json`` + ``entries.jsonl``, ``pd_facts.json``,
  ``release/manifest.py``, ``sglang/startup/gate.py``, ``explain/releases.json``);
- add a deployment format: 2 in kvcheck (the reader, ``reader.py``) + its test;
- add a check: 2 or 3 in kvcheck (the check module and its example; ``checks/__init__.py``
  for a new module) + its test;
- add a KV pool: 3 in kvcheck (``pools/<pool>.py``, ``pools/base.py``,
  ``pools/__init__.py``) + decisions/states where they differ + its test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import model_dir

REPO = Path(__file__).resolve().parent.parent
LAUNCH = "python -m sglang.launch_server"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package and the generator scripts (``tests/stubs`` for gen_flags)."""
    root = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "kvcheck", root / "kvcheck", ignore=ignore)
    shutil.copytree(REPO / "scripts", root / "scripts", ignore=ignore)
    shutil.copytree(REPO / "tests" / "stubs", root / "tests" / "stubs", ignore=ignore)
    return root


def py(root: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def kvcheck(root: Path, *args: str) -> tuple[int, dict]:
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run(
        [sys.executable, "-m", "kvcheck", *args, "--format", "json"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode == 2:  # kvcheck's own input error: a message, no report
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        return 2, {"error": proc.stderr}
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found (the recipe names a place that moved)"
    path.write_text(text.replace(old, new, 1))


def ids(report: dict) -> set[str]:
    out = {f["id"] for f in report.get("findings", [])}
    for pair in report.get("pairs") or []:
        out |= {f["id"] for f in pair["findings"]}
    return out


def pair_files(tmp: Path, flags: str = "--disaggregation-transfer-backend nixl --page-size 16") -> tuple[Path, Path]:
    model = model_dir("llama-3.1-8b")
    p, d = tmp / "prefill.sh", tmp / "decode.sh"
    p.write_text(f"{LAUNCH} --model-path {model} --disaggregation-mode prefill {flags}\n")
    d.write_text(f"{LAUNCH} --model-path {model} --disaggregation-mode decode {flags} --port 30001\n")
    return p, d


# -- recipe: add a release (0.5.24) ------------------------------------------------------------


def _fake_release_tree(tmp: Path, version: str) -> Path:
    """``<tree>/<version>/sglang``: the installed SGLang's code under another release number
    (every entry linked, ``version.py`` rewritten): a stand-in for the new release's wheel,
    unzipped, whose parser and PD code are the installed release's."""
    installed = Path(importlib.util.find_spec("sglang").origin).parent
    pkg = tmp / "sgl" / version / "sglang"
    pkg.mkdir(parents=True)
    for entry in installed.iterdir():
        if entry.name not in ("version.py", "_version.py", "__pycache__"):
            (pkg / entry.name).symlink_to(entry)
    (pkg / "version.py").write_text(f'__version__ = "{version}"\n__version_tuple__ = tuple(__version__.split("."))\n')
    return tmp / "sgl"


VERIFIED = """
from kvcheck.release.manifest import SUBSYSTEMS, verified, pd_releases
import json
print(json.dumps({{"verified": {{s: verified(s, "{v}") for s in SUBSYSTEMS}}, "window": "{v}" in pd_releases()}}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is None, reason="needs the installed SGLang (its parser is generated)"
)
def test_recipe_add_a_release(copy: Path, tmp_path: Path):
    new = "0.5.24"
    tree = _fake_release_tree(tmp_path, new)
    p, d = pair_files(tmp_path)
    before = json.loads(py(copy, VERIFIED.format(v=new)).stdout)
    assert not any(before["verified"].values()) and not before["window"]
    rc, rep = kvcheck(copy, "preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", new)
    assert rc == 4 and rep["verdict"] == "unchecked"

    # 1. scripts/gen_flags.py with the release's wheel (here: the tree holding it).
    gen = subprocess.run(
        [sys.executable, "scripts/gen_flags.py", "--tree", str(tree)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(copy)),
    )
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert (copy / "kvcheck/sglang/flagstore/r" / f"{new}.json").exists()
    # 2. scripts/gen_pd_facts.py: its PD facts join pd_facts.json.
    facts = subprocess.run(
        [sys.executable, "scripts/gen_pd_facts.py", str(tree / new)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert facts.returncode == 0, facts.stderr[-3000:]
    stored = json.loads((copy / "kvcheck/sglang/pd_facts.json").read_text())
    assert stored[new]["decision_hash"] == stored["0.5.23"]["decision_hash"]  # same code: a known digest

    # Steps 1-2 alone: the release is still after NEWEST, verified for nothing.
    half = json.loads(py(copy, VERIFIED.format(v=new)).stdout)
    assert not any(half["verified"].values())

    # 3. NEWEST in kvcheck/release/manifest.py.
    edit(copy / "kvcheck/release/manifest.py", 'NEWEST = "0.5.23"', f'NEWEST = "{new}"')
    # 4. Start-up: STARTUP_VERIFIED_RELEASES (kvcheck/sglang/startup/gate.py), once measured
    #    against the release's own prepare_server_args (tests/test_startup_releases.py).
    edit(copy / "kvcheck/sglang/startup/gate.py", '    "0.5.23",\n)', f'    "0.5.23",\n    "{new}",\n)')
    # 5. scripts/gen_message_releases.py over every release (it rescans the whole tree).
    (tree / "0.5.23").mkdir()
    (tree / "0.5.23" / "sglang").symlink_to(Path(importlib.util.find_spec("sglang").origin).parent)
    msgs = subprocess.run(
        [sys.executable, "scripts/gen_message_releases.py", "--tree", str(tree)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(copy)),
    )
    assert msgs.returncode == 0, msgs.stderr[-3000:]

    after = json.loads(py(copy, VERIFIED.format(v=new)).stdout)
    assert after["verified"] == {
        "flags": True,
        "startup": True,
        "bootstrap": True,
        "decision": True,
        "states": True,
        "explain": True,
    }, after
    assert after["window"]
    rc_new, rep_new = kvcheck(copy, "preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", new)
    rc_old, rep_old = kvcheck(copy, "preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", "0.5.23")
    assert (rc_new, rep_new["verdict"], ids(rep_new)) == (rc_old, rep_old["verdict"], ids(rep_old))
    assert rc_new == 0


# -- recipe: add a deployment format -----------------------------------------------------------

TOY_READER = '''
"""A toy deployment format (CONTRIBUTING.md's recipe, followed in a test): a JSON object
``{"toy-servers": [{"role": ..., "launch": "python -m sglang.launch_server ..."}]}``."""

from __future__ import annotations

import shlex
from pathlib import Path

from kvcheck.sources.deployments.instance import Deployment, Instance, Location


def is_toy(doc: dict) -> bool:
    return isinstance(doc.get("toy-servers"), list)


def read_toy(path: Path, doc: dict) -> Deployment:
    file = str(path)
    dep = Deployment(name=path.name, source=Location(file, 1))
    for i, server in enumerate(doc["toy-servers"]):
        argv = shlex.split(server["launch"])[3:]  # without "python -m sglang.launch_server"
        role = argv[argv.index("--disaggregation-mode") + 1]
        locations = {a: Location(file, i + 2) for a in argv if a.startswith("--")}
        dep.instances.append(Instance(role=role, name=f"server-{i}", location=Location(file, i + 2), argv=argv,
                                      arg_locations=locations))
    return dep
'''


def test_recipe_add_a_deployment_format(copy: Path, tmp_path: Path):
    p, d = pair_files(tmp_path)
    toy = tmp_path / "deploy.json"
    servers = [{"role": r, "launch": f.read_text().strip()} for r, f in (("prefill", p), ("decode", d))]
    toy.write_text(json.dumps({"toy-servers": servers}))
    rc, rep = kvcheck(copy, "preflight", "-f", str(toy), "--sglang-version", "0.5.23")
    # not a format kvcheck reads yet: no prefill/decode server is found in it
    assert rc == 2 and any(
        m in rep["error"]
        for m in ("no SGLang launch line found", "found no prefill or decode server", "no prefill or decode server was read")
    ), rep

    # 1. A reader in kvcheck/sources/deployments/ returning Deployments of Instances.
    (copy / "kvcheck/sources/deployments/toy.py").write_text(TOY_READER)
    # 2. Register it in kvcheck/sources/deployments/reader.py (read_deployment_file).
    reader = copy / "kvcheck/sources/deployments/reader.py"
    edit(
        reader,
        "    from kvcheck.sources.deployments import compose, dynamosdk, kubernetes, scripts, sglang_config, srtslurm\n",
        "    from kvcheck.sources.deployments import compose, dynamosdk, kubernetes, scripts, sglang_config, srtslurm, toy\n",
    )
    edit(
        reader,
        "        if len(docs) == 1 and srtslurm.is_recipe(docs[0]):",
        "        if len(docs) == 1 and toy.is_toy(docs[0]):\n            return [toy.read_toy(path, docs[0])]\n"
        "        if len(docs) == 1 and srtslurm.is_recipe(docs[0]):",
    )

    rc_f, dep = kvcheck(copy, "preflight", "-f", str(toy), "--sglang-version", "0.5.23")
    rc_p, pair = kvcheck(copy, "preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", "0.5.23")
    assert (rc_f, dep["verdict"]) == (rc_p, pair["verdict"]) and rc_f == 0, dep
    assert ids(dep) == ids(pair)


# -- recipe: add a check -----------------------------------------------------------------------

TOY_CHECK = '''
"""A toy pair check (CONTRIBUTING.md's recipe, followed in a test)."""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check


@check(
    "toy-page-size-one",
    Severity.WARNING,
    "Page size 1 on a NIXL pair",
    what="Both sides page one token at a time.",
    why="Every token is its own descriptor: the transfer lists are as long as the prompt.",
    fix="Set --page-size to the attention backend's page size on both sides.",
)
def toy_page_size_one(chk, ctx: CheckContext) -> list[Finding]:
    pg = ctx.prefill_geometry
    if pg is not None and pg.page_size == 1:
        return [chk.finding(f"prefill pages {pg.page_size} token at a time")]
    return []
'''


def test_recipe_add_a_check(copy: Path, tmp_path: Path):
    p, d = pair_files(tmp_path, "--disaggregation-transfer-backend nixl --page-size 1")
    # 1. A function decorated with @check(...) in kvcheck/checks/<area>.py; a new module is
    #    imported for registration in kvcheck/checks/__init__.py.
    (copy / "kvcheck/checks/toy.py").write_text(TOY_CHECK)
    listed = py(copy, "import kvcheck.checks as c; print('toy-page-size-one' in c.REGISTRY)")
    assert listed.stdout.strip() == "False"  # a module nobody imports registers nothing
    init = copy / "kvcheck/checks/__init__.py"
    fabric_line = next(line for line in init.read_text().splitlines(keepends=True) if line.startswith("from kvcheck.checks import fabric"))
    edit(init, fabric_line, fabric_line + "from kvcheck.checks import toy  # noqa: F401  (registration)\n")
    # 3. Its example in kvcheck/checks/examples/<id>.sh, headed by its example and run lines.
    examples = copy / "kvcheck/checks/examples"
    missing = py(copy, "from kvcheck.checks.examples import example_for; print(example_for('toy-page-size-one'))")
    assert missing.stdout.strip() == "None"  # tests/test_check_examples.py fails until it is written
    (examples / "toy-page-size-one.sh").write_text(
        "# example: toy-page-size-one warning\n"
        "# run: kvcheck preflight -f toy-page-size-one.sh --sglang-version 0.5.23\n"
        "# Both servers page one token at a time.\n"
        f"{LAUNCH} --model-path {model_dir('llama-3.1-8b')} --disaggregation-mode prefill "
        "--disaggregation-transfer-backend nixl --page-size 1 &\n"
        f"{LAUNCH} --model-path {model_dir('llama-3.1-8b')} --disaggregation-mode decode "
        "--disaggregation-transfer-backend nixl --page-size 1 --port 30001 &\n"
    )
    shown = py(copy, "from kvcheck.checks.examples import example_for; print(' '.join(example_for('toy-page-size-one').command))")
    run = subprocess.run(  # as its run line says, in that directory
        [sys.executable, "-m", "kvcheck", *shown.stdout.split(), "--format", "json"],
        env=dict(os.environ, PYTHONPATH=str(copy)),
        cwd=examples,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "toy-page-size-one" in ids(json.loads(run.stdout)), run.stderr[-2000:]
    # 4. It fires on an input written in the test; the registry knows its id and docs.
    rc, rep = kvcheck(copy, "preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", "0.5.23")
    assert "toy-page-size-one" in ids(rep), rep
    env = dict(os.environ, PYTHONPATH=str(copy))
    docs = subprocess.run(
        [sys.executable, "-m", "kvcheck", "checks", "toy-page-size-one"],
        env=env,
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert docs.returncode == 0 and "Every token is its own descriptor" in docs.stdout
    assert "fires: toy-page-size-one [warning]" in docs.stdout and "--page-size 1" in docs.stdout
    ignored = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvcheck",
            "preflight",
            "--prefill",
            str(p),
            "--decode",
            str(d),
            "--sglang-version",
            "0.5.23",
            "--ignore",
            "toy-page-size-one",
            "--format",
            "json",
        ],
        env=env,
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert all(f.get("ignored") for f in json.loads(ignored.stdout)["findings"] if f["id"] == "toy-page-size-one")


# -- recipe: add a KV pool ---------------------------------------------------------------------

TOY_POOL = '''
"""A toy pool (CONTRIBUTING.md's recipe, followed in a test): an MHA pool whose K and V of
each layer are one region (as a pool that packs them would register them)."""

from __future__ import annotations

from kvcheck.sglang.pools.base import PoolInputs, PoolLayout
from kvcheck.sglang.pools.token import _pool_regions


def build(inp: PoolInputs) -> PoolLayout:
    args = inp.side.args
    start, end = inp.layers
    kv = _pool_regions(inp.model, list(range(start, end)), inp.page_size, args.attn_tp_size, inp.dtype, inp.nbytes,
                       inp.kind, "target", dcp_size=args.dcp_size)
    n = len(kv) // 2
    packed = [dict(k, part="KV", item_len=k["item_len"] + v["item_len"]) for k, v in zip(kv[:n], kv[n:], strict=True)]
    return PoolLayout(pool="TOY_PACKED", regions=packed)
'''


def test_recipe_add_a_kv_pool(copy: Path, tmp_path: Path):
    p, _ = pair_files(tmp_path)
    probe = f"""
    from kvcheck.sources import load_side
    from kvcheck.sglang.geometry import derive_geometry
    side = load_side("{p}", "prefill", sglang_version="0.5.23")
    g = derive_geometry(side)
    print(g.pool, g.n, g.item_lens[0])
    """
    base = py(copy, probe)
    assert base.returncode == 0, base.stderr[-2000:]
    pool, n, item = base.stdout.split()
    assert pool == "MHA"

    # 1. The pool's builder in its own module, kvcheck/sglang/pools/<pool>.py.
    (copy / "kvcheck/sglang/pools/toy.py").write_text(TOY_POOL)
    # 2. Its name in kvcheck/sglang/pools/base.py (PoolName, a constant, POOLS).
    base_py = copy / "kvcheck/sglang/pools/base.py"
    edit(base_py, '"DSV4", "not_modeled"]', '"DSV4", "TOY_PACKED", "not_modeled"]')
    edit(
        base_py,
        "POOLS: Final[tuple[PoolName, ...]] = (MHA,",
        'TOY_PACKED: Final = "TOY_PACKED"\nPOOLS: Final[tuple[PoolName, ...]] = (TOY_PACKED, MHA,',
    )
    # 3. Registered in kvcheck/sglang/pools/__init__.py: BUILDERS and pool_of (which models build it).
    init = copy / "kvcheck/sglang/pools/__init__.py"
    edit(
        init,
        "from kvcheck.sglang.pools import linear, minimax, swa, token\n",
        "from kvcheck.sglang.pools import linear, minimax, swa, token, toy\n",
    )
    edit(init, "    HYBRID_LINEAR: linear.build,\n", '    HYBRID_LINEAR: linear.build,\n    "TOY_PACKED": toy.build,\n')
    edit(
        init,
        "    return MLA if model.is_mla else MHA\n",
        '    if model.architecture == "LlamaForCausalLM":\n        return "TOY_PACKED"\n    return MLA if '
        "model.is_mla else MHA\n",
    )

    after = py(copy, probe)
    assert after.returncode == 0, after.stderr[-2000:]
    pool2, n2, item2 = after.stdout.split()
    assert (pool2, int(n2), int(item2)) == ("TOY_PACKED", int(n) // 2, 2 * int(item))
