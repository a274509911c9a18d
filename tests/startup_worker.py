"""The start-up corpus against one installed SGLang release's own start-up code, in its own
process (one import path per process, like ``tests/conformance_worker.py``).

Run as ``PYTHONPATH=<release dir>:<deps dir>:<repo>:<repo>/tests:<repo>/tests/stubs python
tests/startup_worker.py --release X --draws N --seed S``; prints one JSON object: the release
imported, compared start-ups, the runtime's refusals/starts, kvcheck's stops (``unchecked``),
and every disagreement (kvcheck's ``first_outcome`` for a side on release X vs what X does).

The release's own path runs unmodified: ``prepare_server_args`` (whose ``ServerArgs.__post_init__``
resolves the args in releases before the resolution pipeline), then ``resolve_once()`` where the
release has it, then ``check_server_args()``. The GPU is the one fact a CPU cannot answer: from
0.5.20 SGLang's own scoped platform override (``runtime_context._PlatformOverride``) says it;
before, the platform probes SGLang reads (``is_cuda``, ``is_sm90_supported``,
``is_sm100_supported``, ``is_blackwell_supported``, ``get_device_capability``, the GPU memory
probe: an 80 GB GPU) are answered for the same GPU in every ``sglang.srt`` module that imported
them. A draw whose flags the release's own parser refuses (a flag it does not have) is counted
as ``parser_refused`` and not compared: kvcheck refuses those flags before start-up.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

import startup_corpus as C

GPU_MEMORY_MB = 81559  # an 80 GB GPU as nvidia-smi reports it (MiB)


def _probe_answers(capability: tuple[int, int]) -> dict[str, Any]:
    m, n = capability
    return {
        "is_cuda": True, "is_cuda_alike": True, "is_hip": False, "is_npu": False, "is_xpu": False, "is_musa": False,
        "is_hpu": False, "is_mps": False, "is_cpu": False,
        "is_sm90_supported": m == 9, "is_sm100_supported": m == 10, "is_sm120_supported": m == 12,
        "is_sm100_or_sm110_supported": m in (10, 11), "is_blackwell_supported": m in (10, 11, 12),
        "is_blackwell": m in (10, 11, 12), "is_hopper_with_cuda_12_3": m == 9, "is_flashinfer_available": True,
        "get_device_sm": m * 10 + n, "get_device_capability": capability, "get_nvgpu_memory_capacity": GPU_MEMORY_MB,
        "get_device_memory_capacity": GPU_MEMORY_MB,
    }


@contextlib.contextmanager
def gpu_facts(capability: tuple[int, int]) -> Iterator[None]:
    """This release's platform facts for one NVIDIA GPU, scoped (see the module docstring)."""
    import torch

    answers = _probe_answers(capability)
    saved: list[tuple[Any, str, Any]] = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("sglang") or mod is None:
            continue
        d = getattr(mod, "__dict__", {})
        for fn, value in answers.items():
            cur = d.get(fn)
            if callable(cur) and not inspect.isclass(cur):
                saved.append((mod, fn, cur))
                setattr(mod, fn, (lambda v: (lambda *a, **k: v))(value))
        for flag, fn in (("_is_cuda", "is_cuda"), ("_is_hip", "is_hip"), ("_is_npu", "is_npu"), ("_is_xpu", "is_xpu"),
                         ("_is_cpu", "is_cpu"), ("_is_musa", "is_musa"), ("_is_blackwell", "is_blackwell_supported"),
                         ("_is_sm100_supported", "is_sm100_supported"), ("_is_sm90_supported", "is_sm90_supported"),
                         ("_is_sm120_supported", "is_sm120_supported"), ("_is_flashinfer_available", "is_flashinfer_available")):
            if isinstance(d.get(flag), bool):
                saved.append((mod, flag, d[flag]))
                setattr(mod, flag, answers[fn])
    saved_cap = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda device=None: capability
    override = contextlib.nullcontext()
    try:
        from sglang.srt import runtime_context as rc

        if hasattr(rc, "_PlatformOverride") and hasattr(rc, "_PLATFORM_PROBES"):
            m = capability[0]
            facts = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
                         is_sm90=m == 9, is_sm100=m == 10, is_sm110=m == 11, is_sm120=m == 12, is_sm100_or_sm110=m in (10, 11),
                         is_blackwell=m in (10, 11, 12), is_hopper_with_cuda_12_3=m == 9, has_flashinfer=True,
                         device_sm=m * 10 + capability[1], device_capability=capability)
            known = set(rc._PLATFORM_PROBES) | set(getattr(rc, "_PLATFORM_VALUES", {}))
            override = rc._PlatformOverride(**{k: v for k, v in facts.items() if k in known})
    except ImportError:
        pass
    try:
        with override:
            yield
    finally:
        torch.cuda.get_device_capability = saved_cap
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)


def runtime_outcome(model_dir: Path, flags: dict[str, Any], capability: tuple[int, int], env: dict[str, str]):
    """``None`` (starts), ``"parser"`` (the release's parser refuses a flag), or (exception class
    name, str(exc), the function that raised)."""
    from sglang.srt.server_args import prepare_server_args

    with gpu_facts(capability), C._env(env or {}):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                server_args = prepare_server_args(["--model-path", str(model_dir), "--device", "cuda"] + C.argv(flags))
            if hasattr(server_args, "resolve_once"):
                server_args.resolve_once()
            server_args.check_server_args()
        except SystemExit:
            return "parser"
        except Exception as exc:  # noqa: BLE001  (the runtime's own exception, compared by the caller)
            if isinstance(exc, ImportError):
                traceback.print_exc()
            return type(exc).__name__, str(exc), traceback.extract_tb(exc.__traceback__)[-1].name
    return None


class _Anything:
    """Any attribute, any call, any subscript: another ``_Anything`` (a kernel symbol that an
    import binds and start-up never uses)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *a, **k):
        return _Anything()

    def __getitem__(self, k):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _StubKernels:
    """A test-only stand-in for CUDA kernel packages (``sgl_kernel``, ``deep_gemm``...) that
    older releases import at module level once ``is_cuda()`` says yes: every attribute is a
    callable that is never called on the start-up path (argument resolution runs no kernel)."""

    NAMES = ("sgl_kernel", "deep_gemm", "flash_mla")

    def find_spec(self, fullname, path=None, target=None):
        import importlib.machinery

        if fullname.split(".")[0] not in self.NAMES:
            return None
        try:
            import importlib.util

            if "." not in fullname and importlib.util.find_spec.__self__ is None:  # pragma: no cover
                return None
        except Exception:  # noqa: BLE001
            pass
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        import types

        mod = types.ModuleType(spec.name)
        mod.__path__ = []

        def __getattr__(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Anything()

        mod.__getattr__ = __getattr__
        return mod

    def exec_module(self, module):
        return None


def install_kernel_stubs() -> None:
    """Put ``_StubKernels`` last on ``sys.meta_path`` for the kernel packages not installed here.
    Also lets an older release register a config class whose ``model_type`` the installed
    (newer) transformers already knows (``qwen3_asr``): releases 0.5.13 .. 0.5.17 call
    ``AutoConfig.register`` without ``exist_ok``; their own pinned transformers had no such
    type, so registering over it is what that release's environment does."""
    import importlib.util

    from transformers.models.auto import configuration_auto

    cls = configuration_auto._LazyConfigMapping
    original = cls.register
    cls.register = lambda self, key, value, exist_ok=False: original(self, key, value, exist_ok=True)

    missing = [n for n in _StubKernels.NAMES if importlib.util.find_spec(n) is None]
    if missing:
        finder = _StubKernels()
        finder.NAMES = tuple(missing)
        sys.meta_path.append(finder)


def release_dests() -> set[str]:
    """The dests of this release's own parser (``ServerArgs.add_cli_args``)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return {act.dest for act in parser._actions}


def warm_up(dirs: dict[str, Path]) -> None:
    """Import what ``ServerArgs`` imports lazily (model config, quantization, attention
    registries) under this machine's own facts, once, so that the GPU facts installed per
    start-up do not send an import down a CUDA-only path (e.g. ``sgl_kernel``)."""
    import importlib

    from sglang.srt.server_args import prepare_server_args

    for name in ("sglang.srt.configs.model_config", "sglang.srt.layers.quantization", "sglang.srt.model_executor.model_runner"):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    for d in dirs.values():
        with contextlib.suppress(BaseException), contextlib.redirect_stderr(io.StringIO()):
            sa = prepare_server_args(["--model-path", str(d), "--device", "cuda"])
            if hasattr(sa, "resolve_once"):
                sa.resolve_once()
            sa.check_server_args()


def draw_plain(rng: random.Random):
    """A PD server with the flags published deployments use (TP, DP attention, nodes, page
    size, NIXL or Mooncake, the attention backends per GPU, fp8/bf16 KV, chunked prefill,
    EAGLE/NEXTN MTP with topk 1, two-batch overlap, the radix cache): the flag sets
    ``startup.unrestated_steps`` lets through to the restated steps on every verified release;
    run on the four GPUs by the caller (``--plain-draws``)."""
    model = rng.choice(C.MODEL_NAMES[:3])  # no DSA model
    role = rng.choice(("prefill", "decode"))
    f = {"disaggregation_mode": role, "disaggregation_transfer_backend": rng.choice(("nixl", "mooncake")),
         "tp_size": rng.choice((1, 2, 3, 4, 8)), "page_size": rng.choice((None, 1, 16, 32, 64))}
    if rng.random() < 0.4:
        f["dp_size"] = rng.choice((1, 2, 4, 8))
        f["enable_dp_attention"] = rng.random() < 0.7
    f["nnodes"] = rng.choice((None, None, None, 2, 3))
    backend = rng.choice((None, None, "fa3", "flashinfer", "triton", "trtllm_mla", "trtllm_mha"))
    if backend is not None:
        f[rng.choice(("attention_backend", "attention_backend", "decode_attention_backend", "prefill_attention_backend"))] = backend
    f["kv_cache_dtype"] = rng.choice((None, None, "auto", "fp8_e4m3", "bf16", "bfloat16", "fp8_e5m2"))
    f["chunked_prefill_size"] = rng.choice((None, None, 4096, 8192, 16384, 1000))
    if model == "deepseek-v3" and rng.random() < 0.4:
        f.update({"speculative_algorithm": rng.choice(("EAGLE", "NEXTN")), "speculative_num_steps": rng.choice((1, 3)),
                  "speculative_eagle_topk": 1, "speculative_num_draft_tokens": rng.choice((2, 4))})
    if rng.random() < 0.15:
        f["enable_two_batch_overlap"] = True
        f["moe_a2a_backend"] = rng.choice(("none", "deepep"))
    f["disable_radix_cache"] = rng.random() < 0.2
    f["pp_size"] = rng.choice((None, None, None, None, 2))
    return model, role, {k: v for k, v in f.items() if v is not None and v is not False}, {}


def draw_hicache(rng: random.Random):
    """A PD server with HiCache (``--enable-hierarchical-cache``): the host pool ratio/size,
    I/O backend, memory layout, write policy and L3 storage backend, with the radix cache,
    page size, attention backend and KV dtype around them (``--hicache-draws``)."""
    model = rng.choice(C.MODEL_NAMES[:3])
    role = rng.choice(("prefill", "prefill", "decode"))
    f = {"disaggregation_mode": role, "disaggregation_transfer_backend": rng.choice(("nixl", "nixl", "mooncake")),
         "tp_size": rng.choice((1, 2, 4, 8)), "page_size": rng.choice((None, 1, 16, 64)),
         "enable_hierarchical_cache": rng.random() < 0.9}
    f["hicache_ratio"] = rng.choice((None, None, 1.5, 2.0, 0.5))
    f["hicache_size"] = rng.choice((None, None, None, 64))
    f["hicache_io_backend"] = rng.choice((None, None, "direct", "kernel"))
    f["hicache_mem_layout"] = rng.choice((None, None, "layer_first", "page_first", "page_first_direct"))
    f["hicache_write_policy"] = rng.choice((None, None, "write_back", "write_through", "write_through_selective"))
    f["hicache_storage_backend"] = rng.choice((None, None, None, "file", "mooncake", "nixl"))
    f["attention_backend"] = rng.choice((None, None, "fa3", "flashinfer", "triton"))
    f["kv_cache_dtype"] = rng.choice((None, None, "fp8_e4m3", "bf16"))
    f["disable_radix_cache"] = rng.random() < 0.15
    f["disaggregation_decode_enable_radix_cache"] = role == "decode" and rng.random() < 0.3
    if rng.random() < 0.2:
        f["dp_size"] = rng.choice((2, 4))
        f["enable_dp_attention"] = True
    return model, role, {k: v for k, v in f.items() if v is not None and v is not False}, {}


def draw_hisparse(rng: random.Random):
    """A PD server with HiSparse (``--enable-hisparse``), mostly on the DSA model: roles, KV
    dtypes, the radix cache, DSA backends, page size, speculation and mixed chunk (``--hisparse-draws``)."""
    model = "deepseek-v3.2" if rng.random() < 0.8 else rng.choice(C.MODEL_NAMES[:3])
    role = rng.choice(("decode", "decode", "prefill"))
    f = {"disaggregation_mode": role, "disaggregation_transfer_backend": rng.choice(("nixl", "nixl", "mooncake")),
         "tp_size": rng.choice((1, 4, 8, 8)), "page_size": rng.choice((None, None, 1, 64)),
         "enable_hisparse": rng.random() < 0.9, "disable_radix_cache": rng.random() < 0.7}
    f["kv_cache_dtype"] = rng.choice((None, "auto", "bf16", "bfloat16", "bfloat16", "fp8_e4m3", "fp8_e5m2"))
    backend = rng.choice((None, None, None, "flashmla_sparse", "flashmla_kv", "tilelang", "fa3", "trtllm"))
    if backend is not None:
        f[rng.choice(("dsa_prefill_backend", "dsa_decode_backend"))] = backend
    if rng.random() < 0.25:
        f.update({"speculative_algorithm": rng.choice(("EAGLE", "NEXTN")), "speculative_num_steps": rng.choice((1, 3)),
                  "speculative_eagle_topk": rng.choice((1, 1, 2)), "speculative_num_draft_tokens": rng.choice((2, 4))})
    f["enable_mixed_chunk"] = rng.random() < 0.1
    if rng.random() < 0.2:
        f["dp_size"] = rng.choice((2, 8))
        f["enable_dp_attention"] = True
    return model, role, {k: v for k, v in f.items() if v is not None and v is not False}, {}


def _steps(side):
    """The restated steps alone, without ``first_outcome``'s release gate."""
    from kvcheck.sglang.startup import ORDER, side_gpu

    g = side_gpu(side)
    return next((o for o in (step(side, g) for step in ORDER) if o is not None), None)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", required=True)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--sharded-draws", type=int, default=0)
    ap.add_argument("--plain-draws", type=int, default=0)
    ap.add_argument("--hicache-draws", type=int, default=0)
    ap.add_argument("--hisparse-draws", type=int, default=0)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--steps-only", action="store_true",
                    help="compare the restated steps alone (no release gate): where the restatement differs")
    a = ap.parse_args()
    t0 = time.perf_counter()
    import logging

    logging.disable(logging.CRITICAL)
    import sglang
    from kvcheck.sglang.startup import Refusal, Stop, first_outcome

    out: dict[str, Any] = {"release": a.release, "imported": sglang.__version__, "sglang_file": sglang.__file__,
                           "compared": 0, "parser_refused": 0, "runtime_refusals": 0, "runtime_starts": 0, "stops": 0,
                           "n_disagreements": 0, "disagreements": [], "stop_reasons": {}, "setup_errors": 0}
    dirs = C.model_dirs(Path(a.tmp))
    install_kernel_stubs()
    known = release_dests()
    warm_up(dirs)
    jobs = []
    rng = random.Random(a.seed)
    jobs += [C.draw(rng) for _ in range(a.draws)]
    rng = random.Random(a.seed + 1)
    jobs += [C.draw_sharded_prefill(rng) for _ in range(a.sharded_draws)]
    rng = random.Random(a.seed + 2)
    jobs += [draw_plain(rng) for _ in range(a.plain_draws)]
    n_plain_end = len(jobs)
    rng = random.Random(a.seed + 3)
    jobs += [draw_hicache(rng) for _ in range(a.hicache_draws)]
    rng = random.Random(a.seed + 4)
    jobs += [draw_hisparse(rng) for _ in range(a.hisparse_draws)]
    for n_job, (model, role, flags, env) in enumerate(jobs):
        dropped = sorted(set(flags) - known)
        if dropped:  # flags this release does not have: the same draw without them
            out["flags_dropped"] = out.get("flags_dropped", 0) + 1
            flags = {k: v for k, v in flags.items() if k in known}
        gpus = C.GPUS.items()
        for gpu, capability in gpus:
            try:
                outcome = runtime_outcome(dirs[model], flags, capability, env)
            except Exception as exc:  # noqa: BLE001  prepare_server_args itself failed outside the refusals
                outcome = (type(exc).__name__, str(exc), "prepare_server_args")
            if outcome == "parser":
                out["parser_refused"] += 1
                continue
            side = C.kv_side(role, dirs[model], flags, gpu, env)
            side.sglang_version = a.release
            predicted = _steps(side) if a.steps_only else first_outcome(side)
            out["compared"] += 1
            out["runtime_refusals" if outcome is not None else "runtime_starts"] += 1
            diff = C.compare(outcome, predicted)
            if diff:
                out["n_disagreements"] += 1
                if len(out["disagreements"]) < 400:
                    out["disagreements"].append(f"{model} {role} {gpu} {flags} {env}: {diff}")
            elif isinstance(predicted, Stop):
                out["stops"] += 1
                if a.draws + a.sharded_draws <= n_job < n_plain_end:
                    out["plain_stops"] = out.get("plain_stops", 0) + 1
                k = predicted.reason[:90]
                out["stop_reasons"][k] = out["stop_reasons"].get(k, 0) + 1
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
