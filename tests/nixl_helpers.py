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

    def __init__(self, role: str, config: Path, *extra: str, ttl: float = 60, timeout: float = 60, env: dict | None = None):
        cmd = [sys.executable, "-m", "kvcheck", "agent", "--role", role, "--config", str(config), "--ttl", str(ttl), *extra]
        self.stderr_file = tempfile.TemporaryFile(mode="w+")  # never a pipe nobody drains
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr_file, text=True, cwd=REPO,
                                     env={**os.environ, "UCX_LOG_LEVEL": "error", **(env or {})})
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("{"):
                break
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.stderr()}")
        self.info = json.loads(line)
        assert self.info["event"] == "ready", self.info

    @property
    def listen(self) -> str:
        return self.info["listen"]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read()

    def read_mem(self, addr: int, length: int) -> bytes:
        """``length`` bytes of the agent's memory at ``addr`` (via /proc/PID/mem: same user, our child)."""
        with open(f"/proc/{self.proc.pid}/mem", "rb", buffering=0) as fh:
            fh.seek(addr)
            return fh.read(length)

    def heap(self) -> tuple[int, int]:
        """``(start, end)`` of the agent's [heap] mapping."""
        for line in Path(f"/proc/{self.proc.pid}/maps").read_text().splitlines():
            if line.endswith("[heap]"):
                lo, hi = line.split()[0].split("-")
                return int(lo, 16), int(hi, 16)
        raise AssertionError("no [heap] mapping")

    def cpu_seconds(self) -> float:
        """utime + stime of the agent so far (all threads), from /proc/PID/stat."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> list[dict]:
        """SIGTERM, wait, and return the remaining JSON lines."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=60)  # a deadline on a loaded 2-core machine (two test workers), not a timing
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return [json.loads(x) for x in out.splitlines() if x.startswith("{")]

    def kill(self) -> None:
        if self.proc.stdout is None or self.proc.stdout.closed:
            return  # already killed and reaped
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.communicate()


class StallServer:
    """A TCP server on 127.0.0.1 that accepts and then, per ``mode``: ``stall`` (never
    answers), ``trickle`` (sends ``payload`` one byte every ``every`` seconds), or
    ``close`` (closes at once). Runs in a thread; ``close()`` stops it."""

    def __init__(self, mode: str = "stall", payload: bytes = b"", every: float = 0.5):
        import threading

        self.mode, self.payload, self.every = mode, payload, every
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self._conns.append(conn)
            if self.mode == "close":
                conn.close()
            elif self.mode == "trickle":
                threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(1)
            try:
                conn.recv(65536)
            except OSError:
                pass
            data = self.payload if len(self.payload) > 1000 else self.payload * 1000
            for i in range(len(data)):
                if self._stop.is_set():
                    return
                conn.sendall(data[i:i + 1])
                time.sleep(self.every)
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        self.sock.close()


def etcd_put(url: str, key: bytes, value: bytes) -> None:
    """Write ``key`` = ``value`` into etcd (what anyone who reaches etcd can do)."""
    import base64

    import httpx

    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    assert httpx.post(f"{url}/v3/kv/put", json={"key": b64(key), "value": b64(value)}, timeout=5).status_code == 200


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
