"""Runs SGLang 0.5.23's ``PrefillBootstrapQueue.__init__`` staging checks for the cases on
stdin (``{"cases": {name: flags}, "env": {...}}``) and prints ``{name: outcome}`` as JSON.

For each case: ``prepare_server_args`` -> ``resolve_once`` -> ``check_server_args`` on
``argv[1]`` (a model directory), through ``startup_corpus`` (the GPU is an H100 given by
SGLang's own platform override); an exception there is ``["args", type, str]``. Then the
queue's ``__init__`` runs with the allocator page size and the schedule's chunked-prefill
size the runtime resolved (``resolution_result``); its process-group, allocator and
KV-manager collaborators are stand-ins and ``_init_kv_manager`` stops the run once every
check before it passed (outcome ``null``). A refusal is ``["queue", type, str]``. The
staging checks are the runtime's code, unmodified. Exit 3 (with a reason) when SGLang's
prefill module cannot be imported here.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from unittest import mock


class _StopAfterChecks(Exception):
    """Raised by the stubbed ``_init_kv_manager``: every check before the KV manager passed."""


def outcome(model_dir: Path, flags: dict, env: dict):
    import startup_corpus
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.disaggregation import prefill as prefill_mod
    from sglang.srt.disaggregation.utils import TransferBackend
    from sglang.srt.server_args import prepare_server_args

    with startup_corpus.gpu_facts((9, 0)), startup_corpus._env(env):
        server_args = prepare_server_args(["--model-path", str(model_dir), "--device", "cuda"] + startup_corpus.argv(flags))
        try:
            server_args.resolve_once()
            server_args.check_server_args()
        except Exception as exc:  # noqa: BLE001  (the runtime's own exception, compared by the test)
            return ["args", type(exc).__name__, str(exc)]
        page = resolution_result(server_args, "page_size")
        chunk = resolution_result(server_args, "chunked_prefill_size")
        scheduler = types.SimpleNamespace(
            token_to_kv_pool_allocator=types.SimpleNamespace(page_size=page),
            tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(effective_logical_max_total_num_tokens=1 << 20)),
            kv_shard_widening=1,
        )
        parallel = types.SimpleNamespace(tp_rank=0, pp_rank=0, pp_size=int(flags.get("pp_size", 1)))
        with mock.patch.object(prefill_mod, "get_parallel", lambda: parallel), \
                mock.patch.object(prefill_mod, "get_schedule", lambda: types.SimpleNamespace(chunked_prefill_size=chunk)), \
                mock.patch.object(prefill_mod, "is_mla_backend", lambda pool: False), \
                mock.patch.object(prefill_mod.PrefillBootstrapQueue, "_init_kv_manager", side_effect=_StopAfterChecks):
            try:
                prefill_mod.PrefillBootstrapQueue(
                    token_to_kv_pool=None, draft_token_to_kv_pool=None, req_to_metadata_buffer_idx_allocator=None,
                    metadata_buffers=None, gpu_id=0, bootstrap_port=8998, max_total_num_tokens=1 << 20, scheduler=scheduler,
                    scheduler_stage_metrics=None, transfer_backend=TransferBackend(flags["disaggregation_transfer_backend"]),
                )
            except _StopAfterChecks:
                return None
            except Exception as exc:  # noqa: BLE001
                return ["queue", type(exc).__name__, str(exc)]
    raise AssertionError("PrefillBootstrapQueue.__init__ returned without building its KV manager")


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        import sglang.srt.disaggregation.prefill  # noqa: F401
    except ImportError as exc:
        print(f"SGLang's prefill module does not import here: {exc}")
        return 3
    model_dir = Path(sys.argv[1])
    out = {name: outcome(model_dir, flags, request["env"]) for name, flags in request["cases"].items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
