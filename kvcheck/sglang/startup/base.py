"""What every start-up step shares: the outcome types (``Refusal``, ``Stop``), the model
families the steps name, and the resolved values several steps read (the speculative
algorithm, decode host receive, the DSA KV dtype, the DP layout, the side's release)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.sglang.gpu import Gpu, resolve_gpu
from kvcheck.sglang.model_archs import DEEPSEEK_FAMILY_ARCHS
from kvcheck.sglang.plan import RuntimeErrorPrediction
from kvcheck.sides import Side

OPERATOR_SEES = "the server exits during start-up with this error, before loading the model"


@dataclass(frozen=True)
class Refusal:
    """One predicted start-up refusal: the kvcheck id, the runtime function, the
    exception class name and its ``str()``."""

    id: str
    hook: str
    type: str
    message: str

    def raised_by(self, side: Side) -> str:
        """Where the runtime raises it: the server's argument validation or resolution."""
        validation = self.hook.startswith("validate_hisparse") or self.hook in (
            "check_pipeline_parallel_compat",
            "check_server_args",
        )
        stage = "argument validation" if validation else "argument resolution"
        return f"{side.role}: server start-up ({stage}: {self.hook})"

    def operator_sees(self) -> str:
        return OPERATOR_SEES

    def prediction(self, side: Side) -> RuntimeErrorPrediction:
        return RuntimeErrorPrediction(
            type=self.type,
            message=self.message,
            raised_by=self.raised_by(side),
            when="start-up",
            operator_sees=self.operator_sees(),
        )


@dataclass(frozen=True)
class Stop:
    """The runtime's next step depends on what the inputs do not say: predict no further.
    ``reason`` says what kvcheck would need to know (shown in an ``unchecked`` finding)."""

    reason: str


STOP = Stop("a start-up step kvcheck does not restate decides the next refusal")
_Stop = Stop
Outcome = Refusal | Stop | None
# configs/model_config.is_deepseek_v4 / is_minimax_sparse.
DEEPSEEK_V4_ARCHS = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"})
MINIMAX_SPARSE_ARCHS = frozenset({"MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"})
# model_overrides/deepseek_v2._deepseek_family_overrides is registered for these (it calls
# _dsa_dcp_overrides when the model is DSA): one list, kvcheck.sglang.model_archs.DEEPSEEK_FAMILY_ARCHS.
DSA_OVERRIDE_ARCHS = DEEPSEEK_FAMILY_ARCHS
# model_hook.handle_model_specific_adjustments runs the DSA KV-dtype / split-backend passes
# for these DSA architectures (its list intersected with overrides._DEEPSEEK_FAMILY_ARCHS).
DSA_KV_PASS_ARCHS = DSA_OVERRIDE_ARCHS - {"LongcatFlashForCausalLMNextN"}
# speculative_hook._handle_eagle_family: topk > 1 with page_size > 1 needs one of these.
PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")
# hisparse_hook.HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE.
HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE = {
    "bfloat16": {"flashmla_sparse"},
    "fp8_e4m3": {"flashmla_kv", "flashinfer_sparse_mla"},
}
# hisparse_hook.HISPARSE_KV_CACHE_DTYPES (0.5.14 .. 0.5.23).
HISPARSE_KV_CACHE_DTYPES = ("bfloat16", "fp8_e4m3")
# cp_tp_group_sharing_hook._SUPPORTED_MODELS (0.5.23; 0.5.22 had Glm5Next only).
CP_TP_GROUP_SHARING_ARCHS = frozenset({"Glm5NextForConditionalGeneration", "Qwen4ExpForConditionalGeneration"})


def _is_dsa(side: Side) -> bool:
    return bool(side.model.dsa)


# The architectures whose DSA overrides (page 64, the DSA KV dtype pass, the dsa/nsa backend)
# each release before the arg_groups overrides runs (``_handle_model_specific_adjustments``'s
# ``if model_arch in [...]`` around ``is_deepseek_nsa``/``is_deepseek_dsa``), by the release that
# changed the list; 0.5.5 ran them for every DSA config. From 0.5.15 ``DSA_OVERRIDE_ARCHS``.
_LEGACY_DSA_ARCHS = (
    (
        "0.5.12",
        frozenset(
            {
                "DeepseekV3ForCausalLM",
                "DeepseekV32ForCausalLM",
                "KimiK25ForConditionalGeneration",
                "MistralLarge3ForCausalLM",
                "PixtralForConditionalGeneration",
                "GlmMoeDsaForCausalLM",
            }
        ),
    ),
    (
        "0.5.9",
        frozenset(
            {
                "DeepseekV3ForCausalLM",
                "KimiK25ForConditionalGeneration",
                "MistralLarge3ForCausalLM",
                "PixtralForConditionalGeneration",
                "GlmMoeDsaForCausalLM",
            }
        ),
    ),
    ("0.5.7", frozenset({"DeepseekV3ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"})),
    ("0.5.6", frozenset({"DeepseekV3ForCausalLM"})),
)


def dsa_pass(side: Side, kv_pass: bool = False) -> bool:
    """Whether the side's release runs its DSA model overrides for this (DSA) model: from
    SGLang 0.5.15 ``DSA_OVERRIDE_ARCHS`` (``DSA_KV_PASS_ARCHS`` for the KV-dtype / split-backend
    passes, ``kv_pass``); before, that release's architecture list (``_LEGACY_DSA_ARCHS``)."""
    if not _is_dsa(side):
        return False
    arch = _arch(side)
    if release_at_least(side, "0.5.15"):
        return arch in (DSA_KV_PASS_ARCHS if kv_pass else DSA_OVERRIDE_ARCHS)
    for first, archs in _LEGACY_DSA_ARCHS:
        if release_at_least(side, first):
            return arch in archs
    return True


def _arch(side: Side) -> str:
    return side.model.architecture


def _effective_transfer_backend(side: Side) -> str:
    """``mooncake_tcp`` is rewritten to ``mooncake`` first thing in handle_pd_disaggregation."""
    b = side.args.disaggregation_transfer_backend
    return "mooncake" if b == "mooncake_tcp" else b


def resolved_speculative_algorithm(side: Side) -> str | None:
    """handle_speculative_decoding: upper-cased, then ``_resolve_speculative_algorithm_alias``
    (NEXTN and EAGLE become EAGLE, or FROZEN_KV_MTP for a Gemma4 assistant draft)."""
    algo = side.args.speculative_algorithm
    if algo is None:
        return None
    algo = algo.upper()
    if algo in ("NEXTN", "EAGLE"):
        draft = side.draft_model.architecture if side.draft_model is not None else ""
        if draft in ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"):
            return "FROZEN_KV_MTP"
        return "EAGLE"
    return algo


def host_receive_on(side: Side) -> bool:
    """Whether decode host receive (``--disaggregation-decode-host-receive-threshold``) is
    on. SGLang 0.5.21 introduced the flag with default 0.0, on when > 0
    (``handle_pd_disaggregation``, ``DecodePreallocQueue._init_kv_manager`` of 0.5.21);
    0.5.22 inverted it: default 1.0, on when < 1 (0.5.22, 0.5.23). Releases before 0.5.21
    have no such flag (the args keep 1.0: off)."""
    from kvcheck.sglang.releases import in_range, side_release

    t = side.args.disaggregation_decode_host_receive_threshold
    version = side_release(side)[0]
    if version and in_range(version, "0.5.21", "0.5.22"):
        # off unless given: the release's own default (0.0) is off
        return "disaggregation_decode_host_receive_threshold" in (side.raw_args or {}) and t > 0
    return t < 1


def _retraction_backup(side: Side) -> str | None:
    """handle_pd_disaggregation declares ``host_pool`` whenever decode host receive is on
    (``host_receive_on``)."""
    a = side.args
    if host_receive_on(side):
        return "host_pool"
    return a.disaggregation_decode_retraction_backup


def _dsa_resolved_kv_dtype(side: Side, gpu: Gpu) -> str | None:
    """overrides._dsa_kv_cache_dtype_default on CUDA: ``bf16`` -> ``bfloat16``; ``auto`` ->
    ``fp8_e4m3`` on SM100+ (capability major >= 10) else ``bfloat16``."""
    kv = side.args.kv_cache_dtype
    if kv == "auto":
        return "fp8_e4m3" if gpu.capability[0] >= 10 else "bfloat16"
    return "bfloat16" if kv == "bf16" else kv


def _resolved_kv_dtype(side: Side, gpu: Gpu) -> str:
    """The KV dtype string the later hooks read: a DSA model's is rewritten by
    ``_dsa_kv_cache_dtype_default``; every other model keeps the flag's string."""
    if dsa_pass(side, kv_pass=True):
        return _dsa_resolved_kv_dtype(side, gpu) or side.args.kv_cache_dtype
    return side.args.kv_cache_dtype


def _raw(side: Side, dest: str, default=None):
    """A flag kvcheck does not type (``Side.raw_args``), or its SGLang default."""
    v = side.raw_args.get(dest, default)
    return default if v is None else v


def _env_bool(side: Side, name: str) -> bool:
    """``sglang.srt.environ.EnvBool.parse``: true/1/yes/y (any case) is on; unset is off."""
    v = side.env.get(name)
    return v is not None and v.lower() in ("true", "1", "yes", "y")


def release_at_least(side: Side, first: str) -> bool:
    """Whether the side's SGLang release (``releases.side_release``: its ``sglang_version``,
    the newest modeled release when none was resolved) is ``first`` or later. Gates the
    start-up steps that exist from ``first`` on; a side on an unknown release is never
    judged (``unknown-release``), so ``False`` there is never read as a pass."""
    from kvcheck.sglang.releases import in_range, side_release

    version = side_release(side)[0]
    return version is not None and in_range(version, first)


def dp_layout(side: Side) -> tuple[int, int]:
    """(dp_size, attn_dp_size) after ``parallel_hook.handle_deprecated_dp_attention``
    (SGLang 0.5.23): ``--enable-dp-attention`` with ``--attn-dp-size 1`` moves
    ``dp_size`` into ``attn_dp_size`` and sets ``dp_size`` to 1."""
    a = side.args
    if a.enable_dp_attention and a.attn_dp_size == 1:
        return 1, a.dp_size
    return a.dp_size, a.attn_dp_size


def side_gpu(side: Side) -> Gpu:
    """The side's GPU (``Side.gpu``), Hopper (h100) when not given."""
    return resolve_gpu(side.gpu)


def side_release_name(side: Side) -> str:
    """The side's release as ``releases.side_release`` resolves it (``"?"`` when unknown)."""
    from kvcheck.sglang.releases import side_release

    return side_release(side)[0] or "?"
