"""A real Triton Inference Server on this machine: the one nvidia-pytriton bundles.

PyPI's nvidia-pytriton 0.7.0 (the `triton` extra) ships tritonserver 2.51 with its Python backend
and a Python stub per Python version, but no backend folder a server can use as it is (no stub
beside the library) and no onnxruntime backend. What makes it run, as issue 29 measured:

    backends/python/           libtriton_python.so, triton_python_backend_utils.py and the
                               stub of the stub Python's version — symlinks, in a scratch folder
    PATH                       the stub Python's bin first: the stub finds its Python (and so
                               numpy, onnxruntime, bertonnx) through `python3` on PATH
    LD_LIBRARY_PATH            that Python's sysconfig LIBDIR (else the stub mixes the system
                               libpython with the venv's standard library), then
                               nvidia_pytriton.libs
    flags                      --backend-directory, --http/grpc/metrics-address (127.0.0.1 by
                               default), --allow-gpu-metrics=false, --disable-auto-complete-config
                               (ready in ~0.6 s instead of 2-3 s), --exit-timeout-secs

The stub of Triton 2.51 reads BYTES tensors through numpy's pre-2.0 ABI: with numpy 2 every
text arrives as its first byte repeated (measured here: numpy 2.4.6 fails, 1.26.4 works), so the
stub's Python needs numpy < 2 — `pip install "bertonnx[triton]"` resolves that, and a separate
environment (`stub_python`) serves when the serving one must keep numpy 2.

The server is started with exec semantics (Popen of the binary: the PID held is
tritonserver's) in a process group of its own that its stubs join, dies with its parent
(PR_SET_PDEATHSIG), and names its shared-memory regions with a prefix of its own, so `stop`
ends the stubs of a killed server and removes what they leave in /dev/shm.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import util
from pathlib import Path

from ..core.errors import ConfigError, InputError
from ..core.ports import free_ports, port_free

GLIBC = (2, 35)                     # nvidia-pytriton 0.7.0's wheels are manylinux_2_35
MACHINES = ("x86_64", "aarch64")
SHM = Path("/dev/shm")
EXTRA = "pip install 'bertonnx[triton]'"


@dataclass(frozen=True)
class Bundle:
    """Where nvidia-pytriton put tritonserver and its Python backend."""

    server: Path                    # bin/tritonserver
    backend: Path                   # backends/python (libtriton_python.so, the utils file)
    stubs: Path                     # python_backend_stubs/<major.minor>/
    libs: Path                      # site-packages/nvidia_pytriton.libs


@dataclass(frozen=True)
class StubPython:
    """The Python the stub runs the model in: its bin folder, version, library folder."""

    bin: Path
    version: str                    # "3.11"
    libdir: Path


def check_platform() -> None:
    """ConfigError unless this machine can run the bundled tritonserver."""
    system, machine = platform.system(), platform.machine()
    if system != "Linux" or machine not in MACHINES:
        raise ConfigError(f"the bundled Triton server runs on Linux x86-64 or aarch64, not "
                          f"{system} {machine}", "run `bertonnx serve` (the default engine), or "
                          "export-triton into a Triton container")
    libc, version = platform.libc_ver()
    found = tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) if version else ()
    if libc != "glibc" or found < GLIBC:
        raise ConfigError(f"the bundled Triton server needs glibc ≥ {'.'.join(map(str, GLIBC))}, "
                          f"this system has {libc or 'no glibc'} {version}".rstrip(),
                          "run `bertonnx serve`, or export-triton into a Triton container "
                          "(nvcr.io/nvidia/tritonserver)")


def find_bundle() -> Bundle:
    """The tritonserver nvidia-pytriton installed (ConfigError when the extra is missing)."""
    spec = util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("--engine triton needs the triton extra (nvidia-pytriton)", EXTRA)
    root = Path(spec.submodule_search_locations[0]) / "tritonserver"
    bundle = Bundle(root / "bin" / "tritonserver", root / "backends" / "python",
                    root / "python_backend_stubs", root.parent.parent / "nvidia_pytriton.libs")
    for path in (bundle.server, bundle.backend / "libtriton_python.so", bundle.stubs):
        if not path.exists():
            raise ConfigError(f"nvidia-pytriton has no {path.relative_to(root.parent)}",
                              "pip install --force-reinstall nvidia-pytriton==0.7.0")
    return bundle


# the stub's model imports the pipelines when Triton loads it: a dependency missing there is
# named here, in one line, instead of in Triton's log
_PROBE = ("import json, sys, sysconfig, numpy\n"
          "import bertonnx.runtime.triton.stub, bertonnx.runtime.core.pipelines\n"
          "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'numpy': numpy.__version__,"
          " 'libdir': sysconfig.get_config_var('LIBDIR'),"
          " 'shared': bool(sysconfig.get_config_var('Py_ENABLE_SHARED')),"
          " 'ldlibrary': sysconfig.get_config_var('LDLIBRARY')}))")


def stub_python(python: str | Path | None, bundle: Bundle) -> StubPython:
    """Check the Python the stub will run (default: this one) and say what it lacks."""
    exe = Path(python) if python else Path(sys.executable)
    try:
        done = subprocess.run([str(exe), "-c", _PROBE], capture_output=True, text=True,
                              timeout=120)
    except OSError as e:
        raise ConfigError(f"cannot run the stub's Python {exe}: {e.strerror}",
                          "pass --triton-python PATH of a Python with bertonnx installed")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["it failed"])[-1]
        raise ConfigError(f"the stub's Python {exe} cannot load bertonnx's Triton model ({last})",
                          f"{EXTRA} in that environment")
    info = json.loads(done.stdout)
    if int(info["numpy"].split(".")[0]) >= 2:
        raise ConfigError(f"Triton 2.51's Python stub needs numpy < 2; {exe} has numpy "
                          f"{info['numpy']}", f"{EXTRA} (it installs numpy<2), or pass "
                          "--triton-python PATH of an environment with numpy<2 and bertonnx")
    if not info["shared"] or not (Path(info["libdir"]) / info["ldlibrary"]).exists():
        raise ConfigError(f"{exe} has no shared libpython (the Triton stub links one)",
                          "use a Python built with --enable-shared (distribution and pyenv "
                          "builds with PYTHON_CONFIGURE_OPTS=--enable-shared are)")
    if not (bundle.stubs / info["version"] / "triton_python_backend_stub").exists():
        have = ", ".join(sorted(p.name for p in bundle.stubs.iterdir()))
        raise ConfigError(f"nvidia-pytriton has no Python stub for Python {info['version']} "
                          f"(it has {have})", "use one of those Python versions")
    return StubPython(exe.parent, info["version"], Path(info["libdir"]))


def backend_folder(root: Path, bundle: Bundle, stub: StubPython) -> Path:
    """root/backends/python: symlinks to the backend library, its utils and the stub."""
    folder = root / "backends" / "python"
    folder.mkdir(parents=True)
    for src in (bundle.backend / "libtriton_python.so",
                bundle.backend / "triton_python_backend_utils.py",
                bundle.stubs / stub.version / "triton_python_backend_stub"):
        (folder / src.name).symlink_to(src)
    return folder.parent


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int

    @classmethod
    def choose(cls, host: str, http: int, grpc: int | None = None,
               metrics: int | None = None) -> "Ports":
        """HTTP on `http`, gRPC on http + 1 and metrics on http + 2 unless given (Triton's own
        8000/8001/8002); port 0 picks free ports. InputError names a port in use."""
        if http == 0:
            http, free_grpc, free_metrics = free_ports(host, 3)
            grpc, metrics = grpc or free_grpc, metrics or free_metrics
        ports = cls(http, grpc or http + 1, metrics or http + 2)
        for what, port in (("HTTP", ports.http), ("gRPC", ports.grpc),
                           ("metrics", ports.metrics)):
            if not 0 < port < 65536:
                raise InputError(f"the {what} port {port} is out of range",
                                 "pass --port below 65534")
            if not port_free(host, port):
                raise InputError(f"the {what} port {port} on {host} is in use",
                                 "pass another --port (or --grpc-port / --metrics-port)")
        return ports


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class TritonServer:
    """tritonserver on a model repository, started by `start()`, stopped by `stop()`."""

    def __init__(self, repository: Path, scratch: Path, ports: Ports, *,
                 host: str = "127.0.0.1", python: str | Path | None = None,
                 exit_timeout_s: int = 10, log: Path | None = None):
        check_platform()
        self.bundle = find_bundle()
        self.stub = stub_python(python, self.bundle)
        self.repository, self.scratch, self.ports, self.host = repository, scratch, ports, host
        self.exit_timeout_s = exit_timeout_s
        self.log = log
        self.shm_prefix = f"bertonnx_triton_{os.getpid()}_{time.monotonic_ns() % 10**9}_"
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def client_host(self) -> str:
        """Where a client on this machine reaches it."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    @property
    def url(self) -> str:
        return f"http://{self.client_host}:{self.ports.http}"

    def command(self, backends: Path) -> list[str]:
        p = self.ports
        return [str(self.bundle.server), f"--model-repository={self.repository}",
                f"--backend-directory={backends}",
                f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
                f"--http-address={self.host}", f"--grpc-address={self.host}",
                f"--metrics-address={self.host}", f"--http-port={p.http}",
                f"--grpc-port={p.grpc}", f"--metrics-port={p.metrics}",
                "--allow-gpu-metrics=false", "--disable-auto-complete-config",
                f"--exit-timeout-secs={self.exit_timeout_s}"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(self.stub.bin), env.get("PATH", "")])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(self.stub.libdir), str(self.bundle.libs),
             *([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else [])])
        return env

    def start(self, ready_timeout_s: float = 120.0) -> "TritonServer":
        backends = backend_folder(self.scratch, self.bundle, self.stub)
        out = open(self.log, "ab") if self.log else None
        try:
            self.proc = subprocess.Popen(self.command(backends), env=self.environment(),
                                         stdout=out, stderr=subprocess.STDOUT if out else None,
                                         stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent,
                                         # its own process group, which its stubs join: `stop`
                                         # ends them with it, however it ended
                                         process_group=0)
        finally:
            if out:
                out.close()
        try:
            self.wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            ended = self.exited()
            if ended is not None:
                raise ConfigError(f"tritonserver exited with status {ended} before it was "
                                  "ready", "its log says why" + (f" ({self.log})" if self.log
                                                                  else " (above)"))
            if time.monotonic() > deadline:
                raise ConfigError(f"tritonserver was not ready within {timeout_s:g} s",
                                  "its log says which model is still loading")
            time.sleep(0.1)

    # tritonserver is left unreaped until `stop`: while it is, its PID — its stubs' process
    # group's id — cannot be another process's, so ending the group ends only what it started

    def exited(self) -> int | None:
        """Its exit status once it has exited (not reaped), else None."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return None if info is None else info.si_status

    def wait(self) -> None:
        """Until tritonserver exits (not reaped)."""
        if self.proc.returncode is None:
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.exited() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM, wait (then SIGKILL); then end any stub left in its process group (a server
        killed outright leaves its stubs to notice on their own, which took over a minute on a
        busy machine), reap it, and remove any shared memory its stubs left."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + (timeout_s or self.exit_timeout_s + 10)
        while self.exited() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.exited() is None:
            self.proc.kill()
            self.wait()
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:   # no stub left
                pass
        code = self.proc.wait()
        self.remove_shm()
        return code

    def shm_segments(self) -> list[Path]:
        return sorted(SHM.glob(self.shm_prefix + "*")) if SHM.is_dir() else []

    def remove_shm(self) -> None:
        for p in self.shm_segments():
            p.unlink(missing_ok=True)
