"""Helpers for the NIXL tests: kvcheck agents and a real etcd as child processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "configs" / "models"


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_pair(tmp: Path, model: str, prefill: dict, decode: dict) -> tuple[Path, Path]:
    """Write prefill.yaml/decode.yaml around a bundled model; returns their paths."""
    out = []
    for role, args in (("prefill", prefill), ("decode", decode)):
        data = {"model-path": str(MODELS / model), "disaggregation-mode": role, "disaggregation-transfer-backend": "nixl", **args}
        path = tmp / f"{role}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        out.append(path)
    return out[0], out[1]


UNIFORM = ("llama-3.1-8b", {"tp-size": 2, "page-size": 16}, {"tp-size": 2, "page-size": 16})
MIXED = (
    "deepseek-v3.2",
    {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16", "speculative-algorithm": "EAGLE"},
    {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16", "speculative-algorithm": "EAGLE", "enable-hisparse": True, "disable-radix-cache": True},
)


class AgentProc:
    """A ``kvcheck agent`` child process; ``info`` is its ready line."""

    def __init__(self, role: str, config: Path, *extra: str, ttl: float = 60, timeout: float = 20):
        cmd = [sys.executable, "-m", "kvcheck", "agent", "--role", role, "--config", str(config), "--ttl", str(ttl), *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                     env={**os.environ, "UCX_LOG_LEVEL": "error"})
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("{"):
                break
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.proc.stderr.read()}")
        self.info = json.loads(line)
        assert self.info["event"] == "ready", self.info

    @property
    def listen(self) -> str:
        return self.info["listen"]

    def stop(self) -> list[dict]:
        """SIGTERM, wait, and return the remaining JSON lines."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return [json.loads(x) for x in out.splitlines() if x.startswith("{")]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate()


class Etcd:
    """A real etcd (Debian's ``etcd-server``) on free loopback ports with a temp data dir."""

    def __init__(self):
        binary = shutil.which("etcd")
        if binary is None:
            raise FileNotFoundError("etcd")
        self.dir = tempfile.mkdtemp(prefix="kvcheck-etcd-")
        self.port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [binary, "--data-dir", self.dir, "--name", "kvcheck-test", "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"kvcheck-test=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import httpx

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if httpx.post(f"{self.url}/v3/kv/range", json={"key": "AA=="}, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError("etcd did not start")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_kvcheck(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m kvcheck ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "kvcheck", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, "UCX_LOG_LEVEL": "error"})


def build_blob(name: bytes = b"agent", backends=((b"UCX", b"conn"),), sections=((b"UCX", 0, ((1, 2, 0, b"k"),)),), kind_width: int = 4) -> bytes:
    """A synthetic NIXL metadata blob (same field layout as nixl 1.5.1)."""
    import struct

    def f(tag: bytes, value: bytes) -> bytes:
        return tag + struct.pack("<Q", len(value)) + value + b"|"

    out = b"nixlSerDes|" + f(b"Agent", name) + f(b"Conns", struct.pack("<Q", len(backends)))
    for b, c in backends:
        out += f(b"t", b) + f(b"c", c)
    out += f(b"", b"MemSection") + f(b"nixlSecElms", struct.pack("<Q", len(sections)))
    for backend, kind, regions in sections:
        out += f(b"bknd", backend) + f(b"nixlDList", b"nixlSDList") + f(b"t", kind.to_bytes(kind_width, "little"))
        out += f(b"n", struct.pack("<Q", len(regions)))
        for addr, ln, dev, key in regions:
            out += f(b"", struct.pack("<QQQ", addr, ln, dev) + key)
    return out
