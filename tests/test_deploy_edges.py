"""Deployment readers: the edges (variables, roles behind variables, non-PD servers,
quoting, srt-slurm's newer ``roles:`` block). Inputs are written inline."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvcheck.errors import InputError
from kvcheck.sources.deployments import read_deployments


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MODE", "TP", "X", "Y"):
        monkeypatch.delenv(name, raising=False)


def test_kubernetes_env_cycle_is_input_error(tmp_path):
    p = write(tmp_path, "cycle.yaml", """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers:
            - name: s
              image: lmsysorg/sglang:v0.5.23
              command: [python3, -m, sglang.launch_server, --model-path, $(X), --disaggregation-mode, prefill]
              env:
                - {name: X, value: "$(Y)"}
                - {name: Y, value: "$(X)"}
        """)
    with pytest.raises(InputError, match=r"cycle.yaml: variable [XY] refers to itself \((Y -> X -> Y|X -> Y -> X)\)"):
        read_deployments([p], env={})


def test_role_behind_unset_variable_is_a_problem_not_a_skip(tmp_path):
    p = write(tmp_path, "run.sh", """
        python3 -m sglang.launch_server --model-path m --disaggregation-mode $MODE --port 30000
        python3 -m sglang.launch_server --model-path m --disaggregation-mode decode --port 30001
        """)
    (dep,) = read_deployments([p], env={})
    assert [i.role for i in dep.instances] == ["decode"]
    (prob,) = dep.problems
    assert prob.id == "unresolved-variable" and "MODE is not set" in prob.message and prob.location.line == 1
    (dep2,) = read_deployments([p], env={"MODE": "prefill"})
    assert sorted(i.role for i in dep2.instances) == ["decode", "prefill"] and dep2.problems == []


def test_server_without_disaggregation_mode_among_pd_is_noted(tmp_path):
    p = write(tmp_path, "mix.sh", """
        python -m sglang.launch_server --model-path m --disaggregation-mode prefill
        python -m sglang.launch_server --model-path m --disaggregation-mode decode --port 30001
        python -m sglang.launch_server --model-path m --port 30002
        """)
    (dep,) = read_deployments([p], env={})
    assert len(dep.instances) == 2
    assert [(x.id, x.location.line) for x in dep.problems] == [("not-disaggregated", 3)]


def test_quoting_json_and_defaults(tmp_path):
    p = write(tmp_path, "q.sh", """
        TP=4
        python3 -m sglang.launch_server --model-path m \\
          --json-model-override-args '{"rope_scaling": {"factor": 4.0}}' \\
          --tp-size "${TP:-8}" --dp-size ${DP:-2} --disaggregation-mode=prefill # comment
        """)
    (dep,) = read_deployments([p], env={})
    (i,) = dep.instances
    assert i.argv[i.argv.index("--json-model-override-args") + 1] == '{"rope_scaling": {"factor": 4.0}}'
    assert i.argv[i.argv.index("--tp-size") + 1] == "4" and i.argv[i.argv.index("--dp-size") + 1] == "2"
    assert i.role == "prefill" and i.arg_locations["--disaggregation-mode=prefill".split("=")[0]].line == 4


def test_markdown_with_prose_that_looks_like_yaml(tmp_path):
    p = write(tmp_path, "notes.md", """
        Note: run both on one host.

        ```shell
        python -m sglang.launch_server --model-path m --disaggregation-mode prefill
        python -m sglang.launch_server --model-path m --disaggregation-mode decode --port 30001
        ```
        """)
    (dep,) = read_deployments([p], env={})
    assert [(i.role, i.location.line) for i in dep.instances] == [("prefill", 4), ("decode", 5)]


def test_srt_slurm_roles_block(tmp_path):
    p = write(tmp_path, "r.yaml", """
        name: roles
        model: {path: "hf:Qwen/Qwen3-8B", container: "lmsysorg/sglang:v0.5.23"}
        resources: {gpu_type: b200, gpus_per_node: 8}
        frontend: {type: sglang}
        backend: {type: sglang}
        roles:
          prefill:
            nodes: 1
            workers: 2
            env: {A: "1"}
            args: {tp-size: 4}
          decode:
            nodes: 1
            workers: 1
            args: {tp-size: 8}
        """)
    (dep,) = read_deployments([p], env={})
    pre = [i for i in dep.instances if i.role == "prefill"]
    dec = [i for i in dep.instances if i.role == "decode"]
    assert [i.gpus for i in pre] == [4, 4] and dec[0].gpus == 8
    assert pre[0].env == {"A": "1"} and dec[0].hosts == ["node1"]
    assert pre[0].argv[pre[0].argv.index("--tp-size") + 1] == "4"


def test_directory_and_missing_file_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_deployments([tmp_path / "nope.yaml"])
    with pytest.raises(InputError, match="directory"):
        read_deployments([tmp_path])


def test_envsubst_placeholder_in_manifest_args(tmp_path):
    p = write(tmp_path, "tmpl.yaml", """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: d}
        spec:
          template:
            spec:
              containers:
                - name: s
                  image: lmsysorg/sglang:v0.5.23
                  args: [python3, -m, sglang.launch_server, --model-path, m, --tp-size, "${TP}",
                         --disaggregation-mode, decode]
        """)
    (dep,) = read_deployments([p], env={})
    (u,) = dep.instances[0].unresolved
    assert (u.variable, u.flag, u.location.line) == ("TP", "--tp-size", 10)
    (dep,) = read_deployments([p], env={"TP": "4"})
    assert dep.instances[0].argv[dep.instances[0].argv.index("--tp-size") + 1] == "4"


def test_slurm_script_one_line_on_every_node(tmp_path):
    p = write(tmp_path, "job.sbatch", """
        #!/bin/bash
        #SBATCH --nodes=2
        srun --ntasks-per-node=1 python3 -m sglang.launch_server --model-path m --tp 16 \\
          --nnodes $SLURM_NNODES --node-rank $SLURM_NODEID --dist-init-addr 10.1.1.1:5000 \\
          --disaggregation-mode decode
        python3 -m sglang.launch_server --model-path m --disaggregation-mode prefill --host $SLURMD_NODENAME
        """)
    (dep,) = read_deployments([p], env={})
    d = next(i for i in dep.instances if i.role == "decode")
    assert d.nodes == 2 and d.unresolved == []
    assert [a[a.index("--node-rank") + 1] for a in d.node_argvs] == ["0", "1"]
    assert [a[a.index("--nnodes") + 1] for a in d.node_argvs] == ["2", "2"]
    assert next(i for i in dep.instances if i.role == "prefill").unresolved == []


def test_config_file_beside_the_script_is_merged(tmp_path):
    write(tmp_path, "prefill.yaml", """
        model-path: deepseek-ai/DeepSeek-V3
        tp-size: 8
        disaggregation-mode: prefill
        page-size: 64
        """)
    p = write(tmp_path, "run.sh", """
        cat <<EOF > notes.txt
        python3 -m sglang.launch_server --disaggregation-mode decode
        EOF
        python3 -m sglang.launch_server --config prefill.yaml --page-size 32
        python3 -m sglang.launch_server --config /opt/inside/image.yaml --disaggregation-mode decode
        """)
    (dep,) = read_deployments([p], env={})
    pre = [i for i in dep.instances if i.role == "prefill"]
    dec = [i for i in dep.instances if i.role == "decode"]
    assert len(pre) == 1 and len(dec) == 1  # the here-document body is not a command
    (i,) = pre
    # SGLang: config args first, then the command line (which wins: page size 32)
    assert i.argv[:4] == ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8"]
    assert i.argv[-2:] == ["--page-size", "32"]
    assert i.arg_locations["--tp-size"] == type(i.location)(str(tmp_path / "prefill.yaml"), 2)
    # the decode whose --config is inside the image is kept (its role is on the line),
    # the file it could not read is its own (its other args are unknown)
    (d,) = dec
    assert dep.problems == [] and d.args_hidden is not None
    assert d.args_hidden.id == "config-not-read" and d.args_hidden.location.line == 5


def test_mini_lb_bootstrap_ports(tmp_path):
    p = write(tmp_path, "lb.sh", """
        python -m sglang.launch_server --model-path m --disaggregation-mode prefill --port 30000 --disaggregation-bootstrap-port 9000
        python -m sglang.launch_server --model-path m --disaggregation-mode decode --port 30001
        python -m sglang.srt.disaggregation.mini_lb --prefill http://127.0.0.1:30000 --prefill-bootstrap-ports 9000 --decode http://127.0.0.1:30001
        """)
    (dep,) = read_deployments([p], env={})
    (r,) = dep.routers
    assert [(x.bootstrap_port, x.instance) for x in r.prefills] == [(9000, "prefill@lb.sh:1")]


def test_unquoted_expansion_is_split_into_args(tmp_path):
    p = write(tmp_path, "split.sh", """
        COMMON="--model-path m --tp-size 4"
        python3 -m sglang.launch_server $COMMON --disaggregation-mode prefill --served-model-name "a b"
        python3 -m sglang.launch_server "$COMMON" --disaggregation-mode decode
        """)
    (dep,) = read_deployments([p], env={})
    pre = next(i for i in dep.instances if i.role == "prefill")
    assert pre.argv[:4] == ["--model-path", "m", "--tp-size", "4"] and pre.argv[-1] == "a b"
    dec = next(i for i in dep.instances if i.role == "decode")
    assert dec.argv[0] == "--model-path m --tp-size 4"  # quoted: one argument, as bash passes it


@pytest.mark.parametrize(
    "label, value, gpu",
    [
        ("node.kubernetes.io/instance-type", "p5.48xlarge", "h100"),
        ("node.kubernetes.io/instance-type", "p5en.48xlarge", "h200"),
        ("cloud.google.com/gke-accelerator", "nvidia-b200", "b200"),
        ("nvidia.com/gpu.product", "NVIDIA-GB200", "gb200"),
    ],
)
def test_gpu_kind_from_node_labels(tmp_path, label, value, gpu):
    p = write(tmp_path, "g.yaml", f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: p}}
        spec:
          nodeSelector:
            {label}: {value}
          containers:
            - name: s
              image: lmsysorg/sglang:v0.5.23
              command: [python3, -m, sglang.launch_server, --model-path, m, --disaggregation-mode, prefill]
        """)
    (dep,) = read_deployments([p], env={})
    assert dep.instances[0].gpu_type == gpu and value in dep.instances[0].gpu_source


def test_router_urls_link_by_service_name(tmp_path):
    docs = []
    for name, mode in (("p1", "prefill"), ("p2", "prefill"), ("d1", "decode")):
        docs.append(f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  template:
    spec:
      containers:
        - name: s
          image: lmsysorg/sglang:v0.5.23
          command: [python3, -m, sglang.launch_server, --model-path, m, --port, "8000", --disaggregation-mode, {mode}]
""")
    docs.append("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: router}
spec:
  template:
    spec:
      containers:
        - name: r
          image: lmsysorg/sglang-router:v0.2.4
          command: [python3, -m, sglang_router.launch_router, --pd-disaggregation, --prefill, "http://p2.ns.svc:8000", --prefill, "http://p1:8000", --decode, "http://d1:8000"]
""")
    p = tmp_path / "all.yaml"
    p.write_text("---".join(docs))
    (dep,) = read_deployments([p], env={})
    (r,) = dep.routers
    assert [x.instance for x in r.prefills] == ["p2/s", "p1/s"] and r.decode_instances == ["d1/s"]


def test_router_file_links_to_servers_in_other_files(tmp_path):
    pre = write(tmp_path, "prefill.sh", "python -m sglang.launch_server --model-path m --disaggregation-mode prefill --port 30000\n")
    dec = write(tmp_path, "decode.sh", "python -m sglang.launch_server --model-path m --disaggregation-mode decode --port 30001\n")
    rt = write(tmp_path, "router.sh", "python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 --decode http://127.0.0.1:30001\n")
    deps = read_deployments([pre, dec, rt], env={})
    (r,) = deps[2].routers
    assert r.prefills[0].instance == "prefill@prefill.sh:1" and r.decode_instances == ["decode@decode.sh:1"]


def test_markdown_page_with_a_manifest_block(tmp_path):
    p = write(tmp_path, "guide.md", """
        # Guide

        Apply this:

        ```yaml
        apiVersion: v1
        kind: Pod
        metadata: {name: prefill}
        spec:
          containers:
            - name: s
              image: lmsysorg/sglang:v0.5.23
              command: [python3, -m, sglang.launch_server, --model-path, m,
                        --disaggregation-mode, prefill]
        ```

        and run the decode by hand:

        ```bash
        python3 -m sglang.launch_server --model-path m --disaggregation-mode decode --port 30001
        ```
        """)
    (dep,) = read_deployments([p], env={})
    roles = {i.role: i for i in dep.instances}
    assert set(roles) == {"prefill", "decode"}
    assert roles["prefill"].arg_locations["--disaggregation-mode"].line == 14
    assert roles["prefill"].image == "lmsysorg/sglang:v0.5.23" and roles["decode"].location.line == 20


def _roles_and_tp(dep) -> list[tuple[str, str | None]]:
    return sorted(
        (i.role, i.argv[i.argv.index("--tp-size") + 1] if "--tp-size" in i.argv else None) for i in dep.instances
    )


@pytest.mark.parametrize("name", ["pd.mdx", "pd.md", "pd.txt"])
def test_a_docs_page_with_front_matter_is_read_as_markdown(tmp_path, name):
    """A docs-site page opens with YAML front matter (``---`` / ``title:`` / ``---``) and goes
    on in Markdown, with its manifests in ```` ```yaml ```` blocks: the blocks are the
    deployment (before, the page was parsed as a YAML stream and refused with a syntax error)."""
    pod = """
        ```yaml
        apiVersion: v1
        kind: Pod
        metadata: {{name: {role}}}
        spec:
          containers:
            - name: s
              image: lmsysorg/sglang:v0.5.23
              command: [python3, -m, sglang.launch_server, --model-path, Qwen/Qwen3-8B, --disaggregation-mode, {role}, --tp-size, "{tp}"]
        ```
        """
    p = write(tmp_path, name, """
        ---
        title: "Prefill/decode on two pods"
        sidebar_position: 3
        ---
        # Run it

        Image: `lmsysorg/sglang:latest`. The prefill:
        """ + pod.format(role="prefill", tp=2) + """
        Then the decode:
        """ + pod.format(role="decode", tp=4))
    (dep,) = read_deployments([p])
    assert _roles_and_tp(dep) == [("decode", "4"), ("prefill", "2")]


def test_a_yaml_stream_starting_with_a_document_marker_is_still_yaml(tmp_path):
    """``---`` opening a manifest (no Markdown after the second marker) stays a YAML stream."""
    p = write(tmp_path, "pods.yaml", """
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers:
            - name: s
              image: lmsysorg/sglang:v0.5.23
              command: [python3, -m, sglang.launch_server, --model-path, Qwen/Qwen3-8B, --disaggregation-mode, prefill]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: d}
        spec:
          containers:
            - name: s
              image: lmsysorg/sglang:v0.5.23
              command: [python3, -m, sglang.launch_server, --model-path, Qwen/Qwen3-8B, --disaggregation-mode, decode]
        """)
    (dep,) = read_deployments([p])
    assert _roles_and_tp(dep) == [("decode", None), ("prefill", None)]


def test_a_fenced_block_inside_a_block_quote_loses_its_quote_markers(tmp_path):
    """A GitHub reply quoting the post (``> ```shell`` ... ``> ```"): the commands are read
    without the ``>`` markers (before, ``>`` was an argument and the server a false
    argparse failure)."""
    p = write(tmp_path, "reply.md", """
        > I run the prefill with
        >
        > ```shell
        > python -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill \\
        >   --tp-size 1
        > ```
        >
        > > and the decode with
        > > ```shell
        > > python -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --tp-size 2
        > > ```

        Thanks, looking into it.
        """)
    (dep,) = read_deployments([p])
    assert _roles_and_tp(dep) == [("decode", "2"), ("prefill", "1")]
    assert not any(">" in w for i in dep.instances for w in i.argv)


@pytest.mark.parametrize(
    "guard",
    [
        'if [ -z "$HOST_IP" ]; then\n    echo "HOST_IP is required"\n    exit 1\nfi\n',
        'if [ $# -lt 0 ]; then echo usage; exit 2; elif [ -n "$DEBUG" ]; then set -x; fi\n',
        'case "$MODE" in\n  bad) echo "unsupported"; exit 1 ;;\nesac\n',
    ],
)
def test_a_guard_that_exits_does_not_hide_the_servers_after_it(tmp_path, guard):
    """A guard before the servers (``if [ -z "$X" ]; then ...; exit 1; fi``): bash starts the
    servers when the guard's branch is not taken. Before, the reading that took the branch
    ended at ``exit`` with the ``if`` never closed, so its other alternative was never read
    and the file was refused as "no prefill or decode server"."""
    p = write(tmp_path, "guarded.sh", guard + (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --tp-size 2 &\n"
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --tp-size 4\n"
    ))
    (dep,) = read_deployments([p])
    assert _roles_and_tp(dep) == [("decode", "4"), ("prefill", "2")]


def test_launch_lines_given_as_inline_code_on_a_docs_page(tmp_path):
    """A page that gives its two launch lines as inline code (no fenced block launches a
    server): the spans are the servers (B2; before, the page was refused as launching none)."""
    p = write(tmp_path, "pd.md", """
        # PD on two nodes

        On node 1 run `python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --tp-size 2`
        and on node 2 run `python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --tp-size 4`.

        ```bash
        pip install sglang==0.5.23
        ```
        """)
    (dep,) = read_deployments([p])
    assert _roles_and_tp(dep) == [("decode", "4"), ("prefill", "2")]


def test_inline_code_does_not_add_servers_beside_fenced_launches(tmp_path):
    """Where a fenced block launches the servers, a prose mention in inline code is not one
    more server; and a shell script's comment in backticks is never read as a launch."""
    page = write(tmp_path, "pd.md", """
        Start the prefill (`python3 -m sglang.launch_server --disaggregation-mode prefill ...`):

        ```bash
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --tp-size 2 &
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --tp-size 2 &
        ```
        """)
    (dep,) = read_deployments([page])
    assert _roles_and_tp(dep) == [("decode", "2"), ("prefill", "2")]
    script = write(tmp_path, "pd.sh", """
        # the decode is `python3 -m sglang.launch_server --disaggregation-mode decode --tp-size 8` on node 2
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --tp-size 2 &
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --tp-size 2 &
        """)
    (dep,) = read_deployments([script])
    assert _roles_and_tp(dep) == [("decode", "2"), ("prefill", "2")]


def test_launch_functions_called_through_other_functions_and_case_arms(tmp_path):
    """bash runs a function called from another function (here from a ``case`` arm of
    ``main``) when ``main`` is called: its launch lines are the script's, never "a server
    without --disaggregation-mode"."""
    p = write(tmp_path, "pd.sh", """
        #!/bin/bash
        start_pair() {
          python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --port 31000 &
          python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --port 31001 \\
            --base-gpu-id 1 &
        }
        pick() {
          case "$1" in
            sglang) start_pair ;;
            *) echo "unknown runtime $1" ;;
          esac
        }
        main() { pick sglang; }
        main "$@"
        """)
    (dep,) = read_deployments([p], env={})
    assert sorted((i.role, i.port) for i in dep.instances) == [("decode", 31001), ("prefill", 31000)]


def test_a_function_that_calls_itself_is_a_clear_input_error(tmp_path):
    p = write(tmp_path, "loop.sh", """
        again() {
          python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill
          again
        }
        again
        """)
    with pytest.raises(InputError, match=r"line 5: shell function calls nest too deep or recurse \(again -> again\)"):
        read_deployments([p], env={})


def test_script_written_by_an_unquoted_here_document_is_read_as_it_will_run(tmp_path):
    """``cat > x.sh <<EOF``: the outer shell expands ``$MODEL`` when it writes the file and
    ``\\$PORT`` is written as ``$PORT``, the generated script's own variable (POSIX
    here-document expansion)."""
    p = write(tmp_path, "gen.sh", """
        MODEL=Qwen/Qwen3-8B
        cat > "$HOME/prefill.sh" <<EOF
        #!/bin/bash
        PORT=32000
        exec python3 -m sglang.launch_server \\
          --model-path $MODEL --port \\$PORT \\
          --disaggregation-mode prefill
        EOF
        cat > decode.sh <<'EOF'
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 32001 --disaggregation-mode decode
        EOF
        cat > notes.yaml <<EOF
        note: python3 -m sglang.launch_server --disaggregation-mode decode --port 1
        EOF
        bash "$HOME/prefill.sh" & bash decode.sh &
        """)
    (dep,) = read_deployments([p], env={})
    got = {i.role: i for i in dep.instances}
    assert sorted((i.role, i.port) for i in dep.instances) == [("decode", 32001), ("prefill", 32000)]
    pre = got["prefill"]
    assert pre.argv[pre.argv.index("--model-path") + 1] == "Qwen/Qwen3-8B" and pre.unresolved == []
    assert pre.location.line == 5  # the exec line inside the here-document


def test_a_pd_launch_no_reading_reaches_is_not_called_a_non_pd_server(tmp_path):
    from kvcheck.sources.deployments.sourcing import NoServers

    p = write(tmp_path, "unused.sh", """
        start() {
          python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B \\
            --disaggregation-mode prefill
        }
        echo "start is never called"
        """)
    with pytest.raises(NoServers, match="line 2: an SGLang launch line with --disaggregation-mode that kvcheck could not follow") as e:
        read_deployments([p], env={})
    assert "without --disaggregation-mode" not in str(e.value) and e.value.non_pd == []


def test_a_slurm_task_variable_is_never_parsed_as_its_name(tmp_path):
    """``$SLURM_LOCALID`` is set by Slurm in each task: unknown to kvcheck, it is an
    unresolved value (unchecked), never the text ``$SLURM_LOCALID`` fed to SGLang's int
    parser (a false start-up refusal); a node rank from Slurm is still one argv per node."""
    p = write(tmp_path, "job.sh", """
        #!/bin/bash
        #SBATCH --nodes=2
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill \\
          --base-gpu-id $SLURM_LOCALID --nnodes 2 --node-rank $SLURM_NODEID --dist-init-addr $SLURMD_NODENAME:5000
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --port 31000
        """)
    (dep,) = read_deployments([p], env={})
    (i,) = [i for i in dep.instances if i.role == "prefill"]
    assert [u.variable for u in i.unresolved] == ["SLURM_LOCALID"]
    assert [a[a.index("--node-rank") + 1] for a in i.node_argvs] == ["0", "1"]
    from tests.helpers import run_cli

    proc = run_cli("preflight", "-f", str(p), "--sglang-version", "0.5.23", "--format", "json")
    assert proc.returncode == 4 and "startup-argparse" not in proc.stdout
    assert "SLURM_LOCALID is set by Slurm when each task starts" in proc.stdout


def test_function_calls_that_fan_out_stop_at_a_bound_with_a_clear_input_error(tmp_path):
    """Five functions each calling the one below twenty times run 3.2 million statements
    (bash would start the server that many times): no deeper than 16 and no recursion, so the
    depth check let kvcheck follow every call for minutes. The reading stops after
    ``MAX_CALL_STATEMENTS`` body statements in all, with exit 2 naming the call."""
    from kvcheck.sources.deployments.scripts import MAX_CALL_STATEMENTS

    lines = [f"f{i}() {{ {'; '.join([f'f{i - 1}'] * 20)}; }}" for i in range(1, 6)]
    lines.append("f0() { python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill & }")
    lines.append("f5")
    lines.append("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --port 31001 &")
    p = tmp_path / "fan.sh"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"line 7: shell function calls run more than {MAX_CALL_STATEMENTS} statements"):
        read_deployments([p], env={})


def test_a_script_here_document_only_printed_is_not_a_running_deployment(tmp_path):
    """``cat <<'USAGE'`` with a ``#!`` body and no redirect prints the text to the
    terminal: no shell runs it, so its launch lines are no deployment (they were read as a
    running pair, a verdict on servers the script never starts). The same body written to a
    file (``> /opt/start``, ``| tee``) is still the script it writes."""
    from kvcheck.sources.deployments.sourcing import NoServers

    pair = """#!/bin/bash
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --port 31000 &
        python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --port 31001 &"""
    shown = write(tmp_path, "usage.sh", f"""
        cat <<'USAGE'
        {pair}
        USAGE
        """)
    with pytest.raises(NoServers, match="could not follow"):
        read_deployments([shown], env={})
    for how in ("cat <<'X' > /opt/start", "cat <<'X' | tee /opt/start"):
        written = write(tmp_path, "gen.sh", f"""
        {how}
        {pair}
        X
        """)
        (dep,) = read_deployments([written], env={})
        assert sorted((i.role, i.port) for i in dep.instances) == [("decode", 31001), ("prefill", 31000)]


def test_a_launch_nested_deeper_than_kvcheck_reads_is_an_input_error_not_dropped(tmp_path):
    """Twelve here-document scripts each fed to bash, the innermost starting a prefill with
    --page-size 16: kvcheck stopped reading past eight nested shells and dropped that
    prefill without a word, so the other prefill (page size 64) and the decode passed while
    the script also starts the mismatched one. Now exit 2 saying the shells nest too deep."""
    from kvcheck.sources.deployments.launch import MAX_SHELL_DEPTH

    launch = "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode"
    n = MAX_SHELL_DEPTH + 4
    lines = [f"bash <<'E{i}'" for i in range(n)] + [f"{launch} prefill --port 31000 --page-size 16 &"]
    lines += [f"E{i}" for i in reversed(range(n))]
    lines += [f"{launch} prefill --port 31002 --page-size 64 &", f"{launch} decode --port 31001 --page-size 64 &"]
    p = tmp_path / "nested.sh"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"shells nest more than {MAX_SHELL_DEPTH} deep"):
        read_deployments([p], env={})
    # as deep as kvcheck reads: the inner prefill is read
    lines = [f"bash <<'E{i}'" for i in range(3)] + [f"{launch} prefill --port 31000 --page-size 16 &"]
    lines += [f"E{i}" for i in reversed(range(3))] + [f"{launch} decode --port 31001 --page-size 64 &"]
    p.write_text("\n".join(lines) + "\n")
    (dep,) = read_deployments([p], env={})
    assert sorted((i.role, i.port) for i in dep.instances) == [("decode", 31001), ("prefill", 31000)]
