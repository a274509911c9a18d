"""The server args that shape KV transfer, typed, with SGLang 0.5.23's defaults.

Mirrors the fields of ``sglang.srt.arg_groups.fields`` (parallel, disagg, memory, spec,
model) that decide KV regions, their memory kinds and the bootstrap checks. Every other
flag SGLang accepts is kept untyped in ``Side.raw_args`` (see ``kvcheck.sglang.flags``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvcheck.errors import InputError

# SpeculativeAlgorithm values whose worker owns a draft KV pool (all but NGRAM / none).
NO_DRAFT_POOL_ALGORITHMS = {None, "", "NONE", "NGRAM"}


class ServerArgs(BaseModel):
    """KV-shaping server args of one side (dest names, SGLang 0.5.23 defaults)."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    model_path: str | None = None
    revision: str | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    page_size: int | None = Field(default=None, ge=1, le=1 << 20)

    tp_size: int = Field(default=1, ge=1, le=1 << 16)
    dp_size: int = Field(default=1, ge=1, le=1 << 16)
    attn_dp_size: int = Field(default=1, ge=1, le=1 << 16)
    enable_dp_attention: bool = False
    attn_cp_size: int = Field(default=1, ge=1, le=1 << 16)
    dcp_size: int = Field(default=1, le=1 << 16)  # below 1: SGLang's own start-up refusal (checks/startup.py)
    pp_size: int = Field(default=1, ge=1, le=1 << 16)
    enable_kv_cache_sharding: bool = False

    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_ib_device: str | None = None
    disaggregation_decode_enable_radix_cache: bool = False

    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None

    enable_hisparse: bool = False
    hisparse_config: str | None = None
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0
    hicache_size: int = 0
    disable_radix_cache: bool = False

    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_draft_model_revision: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_kv_cache_dtype: str | None = None
    speculative_adaptive: bool = False

    # Read by the start-up refusals (kvcheck.sglang.startup).
    disaggregation_decode_host_receive_threshold: float = 1.0
    disaggregation_decode_retraction_backup: str | None = None
    disaggregation_decode_allocation_policy: str = "early"
    enable_pd_role_switch: bool = False
    enable_pdmux: bool = False
    decoupled_spec_role: str = "null"
    encoder_only: bool = False
    language_only: bool = False
    hicache_storage_backend: str | None = None
    hicache_write_policy: str = "write_through"
    enable_mixed_chunk: bool = False
    enable_prefill_cp: bool = False
    dsa_prefill_backend: str | None = None
    dsa_decode_backend: str | None = None

    # ----- resolved views (what the runtime computes from the flags) -----
    @property
    def resolved_attn_dp_size(self) -> int:
        """attn_dp_size; the deprecated ``enable_dp_attention`` means attn_dp_size = dp_size."""
        return self.dp_size if self.enable_dp_attention else self.attn_dp_size

    @property
    def attn_tp_size(self) -> int:
        """tp_size // attn_dp_size // attn_cp_size (``derive_attn_tp_size``, 0.5.23)."""
        return max(1, self.tp_size // max(1, self.resolved_attn_dp_size) // max(1, self.attn_cp_size))

    @property
    def has_draft_worker(self) -> bool:
        """A speculative worker that owns a draft KV pool (any algorithm but NGRAM)."""
        algo = (self.speculative_algorithm or "").upper() or None
        return algo not in NO_DRAFT_POOL_ALGORITHMS

    @property
    def radix_cache_enabled(self) -> bool:
        """Whether the radix cache stays on; a PD decode turns it off by itself unless
        ``--disaggregation-decode-enable-radix-cache`` is given, which turns it on even over
        ``--disable-radix-cache`` (``handle_pd_disaggregation`` declares disable_radix_cache=False;
        measured on 0.5.17 .. 0.5.23)."""
        if self.disaggregation_mode == "decode":
            return self.disaggregation_decode_enable_radix_cache
        return not self.disable_radix_cache


def effective_transfer_backend(name: Any) -> Any:
    """The transfer backend a server runs with: ``handle_pd_disaggregation`` (SGLang 0.5.13 ..
    0.5.23, the releases whose parser has the choice) rewrites ``mooncake_tcp`` to ``mooncake``
    with ``MC_FORCE_TCP=1`` (``os.environ.setdefault``) and no ``--disaggregation-ib-device``;
    any other name is itself."""
    return "mooncake" if name == "mooncake_tcp" else name


def mooncake_tcp_as_run(args: dict[str, Any], env: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(args, env) of a server as it runs them: ``--disaggregation-transfer-backend mooncake_tcp``
    becomes ``mooncake`` with ``MC_FORCE_TCP=1`` unless the environment sets it, and the ib
    device dropped (``effective_transfer_backend``); the same deployment written with
    ``mooncake`` and ``MC_FORCE_TCP=1`` gets the same answer. Other args are returned as given."""
    if args.get("disaggregation_transfer_backend") != "mooncake_tcp":
        return args, env
    args = {**args, "disaggregation_transfer_backend": "mooncake"}
    args.pop("disaggregation_ib_device", None)
    env = dict(env)
    env.setdefault("MC_FORCE_TCP", "1")
    return args, env


def build_server_args(values: dict[str, Any], source: str) -> ServerArgs:
    """Validate ``values`` (dest -> value, already coerced) into ``ServerArgs``.

    Raises ``InputError`` naming the file and the first bad field.
    """
    try:
        return ServerArgs(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else None
        flag = f"--{field.replace('_', '-')}" if field else None
        raise InputError(f"{err['msg']} (got {err.get('input')!r})", source=source, field=flag) from None
