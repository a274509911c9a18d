"""Model configs without weights: where a server's ``config.json`` comes from.

Deployment manifests name a model by hub id (``deepseek-ai/DeepSeek-R1``) or by a path
inside the image (``/models/DeepSeek-R1``). ``resolve_model_config`` finds the KV-relevant
config for such a name, in this order, and says which source it used:

1. ``--model-config FILE`` (one file for every server of the run);
2. a local ``--model-path`` directory holding ``config.json`` (relative paths are taken
   from the manifest's folder);
3. a Hugging Face cache (``--models DIR``, else ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``,
   else ``~/.cache/huggingface/hub``): ``models--ORG--NAME/snapshots/REV/config.json``,
   the layout ``huggingface_hub`` writes (``refs/main`` names the revision when present);
4. the catalog shipped with kvcheck (``catalog.json``): the KV-relevant fields of the
   public ``config.json`` of the models people deploy disaggregated, keyed by hub id, each
   with the ``repo@commit:path`` it was read from. Loaded lazily, on the first lookup.
   Its ``aliases`` name a few ids that are the same Hub repository under another name (a
   repository Meta renamed, whose old id redirects), each citing the public record of
   the rename; an alias resolves to its target's entry and the output says so.

A name found nowhere is ``None``: the caller reports an ``unknown-model`` finding (verdict
``unchecked``); kvcheck never guesses a geometry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError

CATALOG_FILE = Path(__file__).with_name("catalog.json")


@dataclass(frozen=True)
class ModelSource:
    """A model's raw ``config.json`` object and where it came from.

    ``raw``: the parsed JSON object (the catalog keeps only KV-relevant fields);
    ``source``: for people, e.g. ``"catalog: deepseek-ai/DeepSeek-R1 (ai-dynamo/...@abc:path)"``;
    ``kind``: ``model-config``, ``local``, ``hf-cache`` or ``catalog``; ``path``: the
    file read (None for the catalog); ``hub_id``: the hub id it was matched by, when any.
    """

    raw: dict[str, Any]
    source: str
    kind: str
    path: Path | None = None
    hub_id: str | None = None


@lru_cache(maxsize=1)
def _catalog_document() -> dict[str, Any]:
    try:
        return json.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"the model catalog cannot be read: {exc}", source=str(CATALOG_FILE)) from None


def load_catalog() -> dict[str, dict[str, Any]]:
    """The shipped catalog: ``{hub_id: {"source": "repo@commit:path", "config": {...}}}``.

    Raises ``InputError`` if the packaged file is unreadable (a broken install)."""
    return _catalog_document()["models"]


def load_catalog_aliases() -> dict[str, dict[str, str]]:
    """The catalog's aliases: ``{other_id: {"alias_of": hub_id, "source": "..."}}``, where
    ``other_id`` is the same Hub repository as ``hub_id`` under another name (renamed on
    the Hub, the old id redirecting) and ``source`` cites the public record of the rename.
    Every ``hub_id`` is a catalog entry (``scripts/build_model_catalog.py`` checks it).

    Raises ``InputError`` if the packaged file is unreadable (a broken install)."""
    return _catalog_document().get("aliases", {})


@lru_cache(maxsize=1)
def _catalog_index() -> tuple[dict[str, str], dict[str, dict[str, str | None]], dict[str, str]]:
    """(lower-case id -> hub id, lower-case last component -> {hub id: the alias that
    carries that name, or None}, lower-case alias -> alias)."""
    by_id = {k.lower(): k for k in load_catalog()}
    by_alias = {k.lower(): k for k in load_catalog_aliases()}
    by_name: dict[str, dict[str, str | None]] = {}
    for k in load_catalog():
        by_name.setdefault(k.rsplit("/", 1)[-1].lower(), {})[k] = None
    for alias, entry in load_catalog_aliases().items():
        by_name.setdefault(alias.rsplit("/", 1)[-1].lower(), {}).setdefault(entry["alias_of"], alias)
    return by_id, by_name, by_alias


def _alias_match(alias: str) -> str:
    entry = load_catalog_aliases()[alias]
    return f"alias {alias}, {entry['source']}"


def catalog_lookup(name: str) -> tuple[str, str] | None:
    """(hub id, how it matched) for ``name`` in the catalog, or None.

    Matches, in order: the hub id (case-insensitive), or a catalog alias of it (the same
    Hub repository under its other name; ``how`` then names the alias and the public
    record of the rename); the last two path components of a path
    (``/models/deepseek-ai/DeepSeek-R1``), as a hub id or an alias; the last component
    alone when exactly one catalog entry has that name or an alias of it by that name
    (``/models/DeepSeek-R1``). Nothing else: no fuzzy match."""
    by_id, by_name, by_alias = _catalog_index()
    key = name.strip().rstrip("/")
    if key.lower() in by_id:
        return by_id[key.lower()], "hub id"
    if key.lower() in by_alias:
        alias = by_alias[key.lower()]
        return load_catalog_aliases()[alias]["alias_of"], _alias_match(alias)
    parts = [p for p in key.split("/") if p]
    if len(parts) >= 2 and f"{parts[-2]}/{parts[-1]}".lower() in by_id:
        return by_id[f"{parts[-2]}/{parts[-1]}".lower()], f"path {name}"
    if len(parts) >= 2 and f"{parts[-2]}/{parts[-1]}".lower() in by_alias:
        alias = by_alias[f"{parts[-2]}/{parts[-1]}".lower()]
        return load_catalog_aliases()[alias]["alias_of"], f"path {name}; {_alias_match(alias)}"
    if parts:
        hits = by_name.get(parts[-1].lower(), {})
        if len(hits) == 1:
            ((hub, via),) = hits.items()
            how = f"name {parts[-1]} of {name}"
            return hub, how if via is None else f"{how}; {_alias_match(via)}"
    return None


def hf_cache_dirs(models_dir: Path | None = None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The Hugging Face hub cache folders to look in: ``models_dir`` (or its ``hub``
    subfolder), then the one hub cache ``huggingface_hub`` itself uses (its ``constants``:
    ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``). Only that one: with ``HF_HOME`` set, ``~/.cache`` is not
    read, so a test (or a CI job) that points ``HF_HUB_CACHE``/``HF_HOME`` elsewhere sees
    no model cached on the machine."""
    env = os.environ if environ is None else environ
    out: list[Path] = []
    if models_dir is not None:
        out += [models_dir, models_dir / "hub"]
    if env.get("HF_HUB_CACHE"):
        out.append(Path(env["HF_HUB_CACHE"]))
    else:
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
        )
        out.append(Path(home) / "hub")
    return [p for p in out if p.is_dir()]


def hf_cache_config(hub_id: str, cache_dirs: list[Path]) -> Path | None:
    """``config.json`` of ``hub_id`` (``ORG/NAME``) in a hub cache folder, or None.

    Layout (huggingface_hub): ``models--ORG--NAME/snapshots/REV/config.json``; the
    revision named by ``refs/main`` wins, else the newest snapshot holding one. A name no
    file system can hold (ENAMETOOLONG) or an unreadable folder is not in the cache."""
    parts = [p for p in hub_id.strip("/").split("/") if p]
    if len(parts) != 2:
        return None
    folder_name = "models--" + "--".join(parts)
    for cache in cache_dirs:
        folder = cache / folder_name
        try:
            if not folder.is_dir():
                continue
            ref = folder / "refs" / "main"
            if ref.is_file():
                cfg = folder / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
                if cfg.is_file():
                    return cfg
            snaps = sorted(
                (p for p in (folder / "snapshots").glob("*/config.json")), key=lambda p: p.stat().st_mtime, reverse=True
            )
        except OSError:  # ENAMETOOLONG (a 10 MB model path), EACCES: not cached here
            continue
        if snaps:
            return snaps[0]
    return None


def _read_json(path: Path) -> dict[str, Any]:
    from kvcheck.sources.files import read_text

    try:
        raw = json.loads(read_text(path))  # regular files only, size-capped
    except RecursionError:
        raise InputError("JSON nested too deep to be a model config", source=str(path)) from None
    except ValueError as exc:
        raise InputError(f"JSON syntax error: {exc}", source=str(path)) from None
    if not isinstance(raw, dict):
        raise InputError("config.json must hold a JSON object", source=str(path))
    return raw


def _is_dir(p: Path) -> bool:
    """``Path.is_dir`` that is False for a path the OS refuses to look up (a name too
    long, ENAMETOOLONG: Python 3.11 raises it) instead of raising."""
    try:
        return p.is_dir()
    except OSError:
        return False


def _is_file(p: Path) -> bool:
    """``Path.is_file``, False where the OS refuses the lookup (see ``_is_dir``)."""
    try:
        return p.is_file()
    except OSError:
        return False


def resolve_model_config(
    model_path: str | None,
    *,
    override: Path | None = None,
    models_dir: Path | None = None,
    base: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ModelSource | None:
    """The model config for ``model_path`` (a hub id or a path), in the order of the module
    docstring; None when no source has it. Raises ``InputError`` for a file that exists
    but cannot be read as JSON."""
    if override is not None:
        if override.is_dir() and (override / "config.json").is_file():
            override = override / "config.json"  # a model directory, as --model-config takes for a pair
        if not override.is_file():
            raise InputError("model config file not found", source=str(override), field="--model-config")
        return ModelSource(_read_json(override), f"--model-config {override}", "model-config", override)
    if not model_path:
        return None
    p = Path(os.path.expanduser(model_path))
    candidates = [p] if p.is_absolute() or base is None else [p, base / p]
    if base is not None:  # a model-path named inside a deployment file: read only under the read root
        from kvcheck.sources.files import within_root

        candidates = [c for c in candidates if within_root(c / "config.json" if _is_dir(c) else c, base)]
    for c in candidates:
        if _is_dir(c) and _is_file(c / "config.json"):
            return ModelSource(_read_json(c / "config.json"), f"local directory {c}", "local", c / "config.json")
        if _is_file(c) and c.name.endswith(".json"):
            return ModelSource(_read_json(c), f"local file {c}", "local", c)
    parts = [x for x in model_path.strip("/").split("/") if x]
    hub_ids = [model_path.strip("/")] if len(parts) == 2 and not model_path.startswith("/") else []
    if len(parts) >= 2 and model_path.startswith("/"):
        hub_ids.append(f"{parts[-2]}/{parts[-1]}")
    caches = hf_cache_dirs(models_dir, environ)
    for hid in hub_ids:
        cfg = hf_cache_config(hid, caches)
        if cfg is not None:
            return ModelSource(_read_json(cfg), f"Hugging Face cache {cfg}", "hf-cache", cfg, hid)
    hit = catalog_lookup(model_path)
    if hit is not None:
        hub_id, how = hit
        entry = load_catalog()[hub_id]
        return ModelSource(
            entry["config"],
            f"kvcheck catalog: {hub_id} (matched by {how}; from {entry['source']})",
            "catalog",
            None,
            hub_id,
        )
    return None
