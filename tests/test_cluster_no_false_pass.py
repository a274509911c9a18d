"""Deployments a tester built to get a false pass (exit 0) or a leak out of `preflight -f`.

Each launch script is written here in the shape SGLang's docs use (one
``python -m sglang.launch_server`` line per server, the router line after them).
The right outcomes come from SGLang 0.5.23's code, cited per test.
"""

from __future__ import annotations

import json

from helpers import model_dir, run_cli

LLAMA = str(model_dir("llama-3.1-8b"))
LAUNCH = "python -m sglang.launch_server"


def _script(tmp_path, *lines: str, name: str = "deploy.sh"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _pair(model: str, extra_p: str = "", extra_d: str = "") -> tuple[str, str]:
    common = "--disaggregation-transfer-backend nixl --page-size 16"
    return (f"{LAUNCH} --model-path {model} --disaggregation-mode prefill {common} {extra_p}",
            f"{LAUNCH} --model-path {model} --disaggregation-mode decode {common} {extra_d} --port 30001")


def _json(proc):
    return json.loads(proc.stdout)


def test_sglang_version_reaches_the_deployment_path(tmp_path):
    # --cuda-graph-max-bs is a flag of 0.5.8's parser and not of 0.5.23's (flag store).
    f = _script(tmp_path, *_pair(LLAMA, "--cuda-graph-max-bs 8"))
    old = run_cli("preflight", "-f", str(f), "--sglang-version", "0.5.8", "-o", "json")
    assert old.returncode != 2, old.stderr
    assert {i["sglang_release"] for i in _json(old)["instances"]} == {"0.5.8"}
    # 0.5.23's argparse finds the abbreviation ambiguous (--cuda-graph-max-bs-decode/-prefill):
    # each instance exits at start-up, a start-up refusal with argparse's text (exit 1), not bad input
    new = run_cli("preflight", "-f", str(f), "--sglang-version", "0.5.23", "-o", "json")
    assert new.returncode == 1, new.stderr
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" in new.stdout
    assert '"startup-argparse"' in new.stdout


def test_a_release_option_that_is_no_release_number_is_bad_usage(tmp_path):
    f = _script(tmp_path, *_pair(LLAMA))
    proc = run_cli("preflight", "-f", str(f), "--sglang-version", "garbage")
    assert proc.returncode == 2 and "--sglang-version" in proc.stderr and "Traceback" not in proc.stderr


def test_router_without_bootstrap_port_falls_back_to_the_decodes_port(tmp_path):
    # Scheduler.handle_generate_request (0.5.23): a request without bootstrap_port gets the
    # server's own --disaggregation-bootstrap-port, so the decode asks 8998 while the
    # prefill serves 9001.
    p, d = _pair(LLAMA, "--disaggregation-bootstrap-port 9001")
    router = "python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 --decode http://127.0.0.1:30001"
    proc = run_cli("preflight", "-f", str(_script(tmp_path, p, d, router)), "-o", "json")
    assert proc.returncode == 1, proc.stderr
    ids = [f["id"] for f in _json(proc)["findings"]]
    assert "router-bootstrap-port" in ids


def test_a_role_behind_an_unset_variable_is_unchecked_not_a_missing_role_failure(tmp_path):
    p, _ = _pair(LLAMA)
    d = f"{LAUNCH} --model-path {LLAMA} --disaggregation-mode $MODE --disaggregation-transfer-backend nixl --page-size 16 --port 30001"
    proc = run_cli("preflight", "-f", str(_script(tmp_path, p, d)), "-o", "json")
    assert proc.returncode == 4, proc.stderr
    assert [(f["id"], f["severity"]) for f in _json(proc)["findings"] if f["id"] == "missing-role"] == [("missing-role", "unchecked")]


def test_one_model_config_for_two_model_paths_is_unchecked(tmp_path):
    p = f"{LAUNCH} --model-path meta-llama/Meta-Llama-3.1-8B --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16"
    d = f"{LAUNCH} --model-path Qwen/Qwen3-8B --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001"
    proc = run_cli("preflight", "-f", str(_script(tmp_path, p, d)), "--model-config", str(model_dir("llama-3.1-8b") / "config.json"), "-o", "json")
    assert proc.returncode == 4, proc.stdout
    pair = _json(proc)["pairs"][0]
    assert any(f["id"] == "same-model" and f["severity"] == "unchecked" for f in pair["findings"])


def test_model_config_may_be_a_model_directory_with_f(tmp_path):
    f = _script(tmp_path, *_pair("meta-llama/Meta-Llama-3.1-8B"))
    proc = run_cli("preflight", "-f", str(f), "--model-config", LLAMA, "--sglang-version", "0.5.23")  # the release this rested on (was assumed)
    assert proc.returncode == 0, proc.stderr


def test_a_secret_in_the_launch_line_never_reaches_an_error_line(tmp_path):
    secret = "sk-kvcheck-test-7f3a9"
    p = f"{LAUNCH} --model-path {LLAMA} --disaggregation-mode prefill --api-key={secret} --page-size {secret}"
    d = f"{LAUNCH} --model-path {LLAMA} --disaggregation-mode decode --port 30001"
    proc = run_cli("preflight", "-f", str(_script(tmp_path, p, d)))
    assert proc.returncode == 1  # the server refuses its --page-size value at start-up (issue 14)
    assert secret not in proc.stderr and secret not in proc.stdout and "--page-size" in proc.stdout


def test_a_self_doubling_variable_is_refused_in_bounded_memory(tmp_path):
    lines = ["A0=xxxxxxxxxxxxxxxx"] + [f'A{i}="$A{i - 1}$A{i - 1}"' for i in range(1, 41)]
    p, d = _pair(LLAMA, "--served-model-name $A40")
    proc = run_cli("preflight", "-f", str(_script(tmp_path, *lines, p, d)))
    assert proc.returncode == 2 and "expands to more than" in proc.stderr


def test_a_huge_flat_yaml_is_refused_before_it_is_composed(tmp_path):
    f = tmp_path / "wide.yaml"
    f.write_text("items: [" + ",".join("1" for _ in range(1_200_000)) + "]\n")
    proc = run_cli("preflight", "-f", str(f))
    assert proc.returncode == 2 and "wide.yaml" in proc.stderr and "refusing" in proc.stderr


def test_allow_unchecked_never_lets_a_model_independent_failure_pass(tmp_path):
    # Unknown model (no config anywhere), but the decode runs mooncake (the default) against
    # a NIXL prefill: GUARD_ASSERT in the prefill's bootstrap thread whatever the model.
    p = f"{LAUNCH} --model-path org/no-such-model --disaggregation-mode prefill --disaggregation-transfer-backend nixl"
    d = f"{LAUNCH} --model-path org/no-such-model --disaggregation-mode decode --port 30001"
    proc = run_cli("preflight", "-f", str(_script(tmp_path, p, d)), "--allow-unchecked", "-o", "json")
    assert proc.returncode == 1, proc.stdout
    found = [f for f in _json(proc)["pairs"][0]["findings"] if f["id"] == "transfer-backend"]
    assert found and found[0]["runtime_error"]["message"] == "First message should be b'NixlMsgGuard'. Foreign traffic?"


def test_allow_unchecked_never_lets_a_decode_pp_size_failure_pass(tmp_path):
    # Unknown model, both sides NIXL, the decode at PP 4 against a PP 2 prefill: SGLang
    # 0.5.23's decode asserts in _resolve_rank_mapping (disaggregation/common/conn.py)
    # "Decode pp size (4) should be equal to prefill pp size (2) or 1" whatever the model.
    nixl = "--disaggregation-transfer-backend nixl"
    p = f"{LAUNCH} --model-path org/no-such-model --disaggregation-mode prefill {nixl} --pp-size 2"
    d = f"{LAUNCH} --model-path org/no-such-model --disaggregation-mode decode {nixl} --pp-size 4 --port 30001"
    proc = run_cli("preflight", "-f", str(_script(tmp_path, p, d)), "--allow-unchecked", "-o", "json")
    assert proc.returncode == 1, proc.stdout
    found = [f for f in _json(proc)["pairs"][0]["findings"] if f["id"] == "pp-size-mismatch"]
    assert found and found[0]["runtime_error"]["message"] == "('Decode pp size (4) should be equal to prefill pp size (2) or 1',)"
    assert found[0]["runtime_error"]["type"] == "AssertionError"
