"""Starting the node workers where kvcheck itself can: on this host (``--local``), or
through a command prefix per node (``--hosts FILE``: ``ip netns exec NS``, ``ssh HOST``,
``srun -w HOST``...). On a cluster the workers are started by the Job or srun line that
``--emit`` writes, and the coordinator only waits for them in etcd.

Hosts file (YAML): ``{NODE: {prefix: [ip, netns, exec, ns1], listen_host: 10.213.0.11,
env: {UCX_TLS: tcp}}}``; ``env`` is the node's own environment on top of kvcheck's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

from kvcheck.errors import InputError


def read_hosts(path: Path) -> dict[str, dict]:
    """The hosts file as ``{node: {"prefix": [...], "listen_host": str|None, "env": {...}}}``."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read the hosts file: {exc}", source=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("the hosts file must map node names to {prefix, listen_host, env}", source=str(path))
    out = {}
    for node, spec in data.items():
        spec = spec or {}
        if not isinstance(spec, dict):
            raise InputError(f"node {node!r}: expected a mapping", source=str(path))
        prefix = spec.get("prefix") or []
        if isinstance(prefix, str):
            prefix = prefix.split()
        env = spec.get("env") or {}
        if not isinstance(prefix, list) or not isinstance(env, dict):
            raise InputError(f"node {node!r}: prefix must be a list, env a mapping", source=str(path))
        out[str(node)] = {
            "prefix": [str(x) for x in prefix],
            "listen_host": spec.get("listen_host"),
            "env": {str(k): str(v) for k, v in env.items()},
        }
    return out


class Launcher:
    """Starts one worker per node (``start``) and ends them all (``close``: SIGCONT, SIGTERM,
    then SIGKILL after ``grace`` seconds, each by its own pid)."""

    def __init__(self, hosts: dict[str, dict] | None = None, *, python: str | None = None, grace: float = 3.0):
        self.hosts = hosts or {}
        self.python = python or sys.executable
        self.grace = grace
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, IO[bytes]] = {}

    def start(self, node: str, *, etcd: str, run: str, ttl: float, join_timeout: float) -> None:
        spec = self.hosts.get(node, {})
        cmd = [
            *spec.get("prefix", []),
            self.python,
            "-m",
            "kvcheck.fabric.worker",
            "--etcd",
            etcd,
            "--run",
            run,
            "--node",
            node,
            "--ttl",
            str(int(ttl)),
            "--join-timeout",
            str(int(join_timeout)),
        ]
        if spec.get("listen_host"):
            cmd += ["--listen-host", spec["listen_host"]]
        elif not self.hosts:
            cmd += ["--listen-host", "127.0.0.1"]
        env = {**os.environ, **spec.get("env", {})}
        log = tempfile.TemporaryFile()
        self._logs[node] = log
        self.procs[node] = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
        )

    def exited(self, node: str) -> int | None:
        p = self.procs.get(node)
        return p.poll() if p is not None else None

    def output(self, node: str) -> str:
        log = self._logs.get(node)
        if log is None:
            return ""
        log.seek(0)
        return log.read()[-2000:].decode(errors="replace")

    def close(self) -> None:
        import time

        for p in self.procs.values():
            if p.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        os.kill(p.pid, sig)
                    except ProcessLookupError:
                        pass
        end = time.monotonic() + self.grace
        for p in self.procs.values():
            try:
                p.wait(timeout=max(end - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for log in self._logs.values():
            log.close()
        self._logs = {}


class SmallEtcd:
    """A single-member etcd kvcheck starts for the run (``--start-etcd HOST:PORT``), with
    a temporary data dir; ``close()`` stops it and removes the dir."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, timeout: float = 15.0):
        import shutil
        import socket
        import time

        from kvcheck.errors import UnreachableError

        binary = shutil.which("etcd")
        if binary is None:
            raise InputError(
                "--start-etcd needs the etcd binary on PATH (Debian: apt-get install etcd-server)", field="--start-etcd"
            )

        def free() -> int:
            with socket.socket() as s:
                s.bind((host, 0))
                return s.getsockname()[1]

        self.dir = tempfile.mkdtemp(prefix="kvcheck-fabric-etcd-")
        port = port or free()
        peer = free()
        self.url = f"http://{host}:{port}"
        self.proc = subprocess.Popen(
            [
                binary,
                "--data-dir",
                self.dir,
                "--name",
                "kvcheck-fabric",
                "--listen-client-urls",
                self.url,
                "--advertise-client-urls",
                self.url,
                "--listen-peer-urls",
                f"http://{host}:{peer}",
                "--initial-advertise-peer-urls",
                f"http://{host}:{peer}",
                "--initial-cluster",
                f"kvcheck-fabric=http://{host}:{peer}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        from kvcheck.nixl.transport import EtcdGateway

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                EtcdGateway(self.url, timeout=1.0).get(b"/kvcheck/fabric/ping")
                return
            except Exception:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.close()
        raise UnreachableError(f"the etcd kvcheck started did not answer within {timeout:g} s", source=self.url)

    def close(self) -> None:
        import shutil

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
