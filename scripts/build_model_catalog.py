#!/usr/bin/env python3
"""Build kvcheck/sources/models/catalog.json from a clone of ai-dynamo/aiconfigurator.

Usage: build_model_catalog.py AIC_CLONE OUT.json [EXTRAS.json ...]

AIC_CLONE is a git directory holding all of aiconfigurator's refs (the mirror the search
tool's ``fetch`` returns, or ``git clone --mirror``): a plain clone has only the branches
and misses configs that live on other refs. The catalog is rebuilt with
``build_model_catalog.py AIC kvcheck/sources/models/catalog.json
scripts/model_catalog_extras.json scripts/catalog_extras_deployed.json scripts/catalog_extras_corpus.json scripts/catalog_extras_public.json [other extras]``.

Takes every ``*/model_configs/ORG--NAME_config.json`` in the clone's history (newest
version of each path), keeps the fields that shape the KV cache (drops tokenizer ids,
vision towers, long quantization ignore lists) and records ``repo@commit:path``.
EXTRAS: ``{hub_id: {"source": "repo@commit:path", "config": {...}}}`` from other public copies,
or ``{old_id: {"alias_of": hub_id, "source": "..."}}`` for a Hub repository that was renamed
(the old id redirects to the new one): the source must cite the public record of the rename.
Aliases go to the catalog's ``aliases`` section; each must name a model in the catalog.
A ModelOpt export whose config.json has no quantization_config gets the fields of its
``ORG--NAME_hf_quant_config.json`` there (quant_method as SGLang names it), as SGLang reads that
file (``_parse_quant_hf_config``); its source then also cites that file.
Later EXTRAS files win over earlier ones and over aiconfigurator for the same hub id.
"""
import json, subprocess, sys
repo, OUT = sys.argv[1], sys.argv[2]
FILES = subprocess.check_output(["bash", "-c", "git -C \"$0\" log --all --format='C %H' --name-only --diff-filter=AM -- '*model_configs/*_config.json' | awk '$1==\"C\"{c=$2;next} NF{ if(!($0 in seen)){seen[$0]=c; print c\" \"$0} }' | grep -v hf_quant", repo], text=True).splitlines()
DROP = {"vision_config","audio_config","id2label","label2id","auto_map","transformers_version","tokenizer_class","bos_token_id","eos_token_id","pad_token_id","task_specific_params","_name_or_path","vocab_size","initializer_range","output_attentions","output_hidden_states","return_dict","torchscript","chat_template","image_token_id","video_token_id","vision_start_token_id","vision_end_token_id","vision_token_id"}
SKIP = ("meta-models--", "nemotron-ultra-rl-", "Qwen3.8-2.4T")
def slim(d, depth=0):
    out = {}
    for k, v in d.items():
        if k in DROP: continue
        if k == "quantization_config" and isinstance(v, dict):
            q = {}
            for qk, qv in v.items():
                if isinstance(qv, (str, int, float, bool)) or qv is None: q[qk] = qv
                elif qk == "kv_cache_scheme" and isinstance(qv, dict): q[qk] = qv
            out[k] = q; continue
        if isinstance(v, dict) and depth == 0 and k == "text_config":
            out[k] = slim(v, 1); continue
        if isinstance(v, list) and len(v) > 256 and k != "layer_types": continue
        out[k] = v
    return out
models = {}
for line in FILES:
    commit, path = line.split()
    name = path.rsplit("/",1)[-1][:-len("_config.json")]
    if "--" not in name or any(s in name for s in SKIP): continue
    hub = name.replace("--", "/", 1)
    raw = json.loads(subprocess.check_output(["git","-C",repo,"show",f"{commit}:{path}"]))
    if "architectures" not in raw and "architectures" not in raw.get("text_config", {}): print("skip noarch", hub, file=sys.stderr); continue
    models[hub] = {"source": f"ai-dynamo/aiconfigurator@{commit}:{path}", "config": slim(raw)}
# ModelOpt exports that keep their quantization in a standalone hf_quant_config.json (config.json
# has no quantization_config): SGLang reads that file when config.json has neither
# quantization_config nor compression_config (ModelConfig._parse_quant_hf_config) and names the
# method by its quant_algo (_parse_modelopt_quant_config, 0.5.23: MIXED_PRECISION with NVFP4
# layers -> modelopt_mixed, else w4afp8; *FP4* -> modelopt_fp4; FP8 -> modelopt_fp8); its
# kv_cache_quant_algo makes --kv-cache-dtype auto resolve to fp8_e4m3 (configure_kv_cache_dtype).
# The catalog carries those fields as the entry's quantization_config, citing the file.
def modelopt_method(q):
    algo = str(q.get("quant_algo") or "")
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers") or {}
        nvfp4 = any(str(v.get("quant_algo", "")).upper() in ("NVFP4", "W4A16_NVFP4") for v in layers.values() if isinstance(v, dict))
        return "modelopt_mixed" if nvfp4 else "w4afp8"
    if "FP4" in algo:
        return "modelopt_fp4"
    if algo == "FP8":
        return "modelopt_fp8"
    return None
HFQ = subprocess.check_output(["bash", "-c", "git -C \"$0\" log --all --format='C %H' --name-only --diff-filter=AM -- '*model_configs/*_hf_quant_config.json' | awk '$1==\"C\"{c=$2;next} NF{ if(!($0 in seen)){seen[$0]=c; print c\" \"$0} }'", repo], text=True).splitlines()
for line in HFQ:
    commit, path = line.split()
    hub = path.rsplit("/",1)[-1][:-len("_hf_quant_config.json")].replace("--", "/", 1)
    entry = models.get(hub)
    if entry is None: continue
    cfg = entry["config"]
    if cfg.get("quantization_config") or cfg.get("compression_config") or cfg.get("text_config", {}).get("quantization_config"): continue
    raw = json.loads(subprocess.check_output(["git","-C",repo,"show",f"{commit}:{path}"]))
    q = raw.get("quantization", raw)
    method = modelopt_method(q)
    if method is None: print("skip hf_quant", hub, q.get("quant_algo"), file=sys.stderr); continue
    cfg["quantization_config"] = slim({"quantization_config": {**q, "quant_method": method}})["quantization_config"]
    entry["source"] += f"; quantization_config from hf_quant_config.json: ai-dynamo/aiconfigurator@{commit}:{path}"
aliases = {}
for extra in sys.argv[3:]:
    e = json.load(open(extra))
    for hub, entry in e.items():
        if "alias_of" in entry: aliases[hub] = {"alias_of": entry["alias_of"], "source": entry["source"]}
        else: models[hub] = {"source": entry["source"], "config": slim(entry["config"])}
for old, a in aliases.items():
    if a["alias_of"] not in models or old in models: sys.exit(f"alias {old} -> {a['alias_of']}: the target must be in the catalog and the alias must not be")
doc = {"about": "KV-relevant fields of public config.json files, keyed by hub id; 'source' is repo@commit:path of the copy read. Built by scripts/build_model_catalog.py.", "models": dict(sorted(models.items(), key=lambda kv: kv[0].lower()))}
with open(OUT, "w") as f:
    f.write('{"about": ' + json.dumps(doc["about"]) + ',\n "models": {\n')
    f.write(",\n".join(f"  {json.dumps(k)}: {json.dumps(v, separators=(',',':'))}" for k, v in doc["models"].items()))
    f.write("\n }")
    if aliases:
        f.write(',\n "aliases": {\n' + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(aliases.items(), key=lambda kv: kv[0].lower())) + "\n }")
    f.write("\n}\n")
print(len(models))
