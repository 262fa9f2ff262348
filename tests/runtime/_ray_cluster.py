"""A Ray cluster of several nodes on this machine, for tests: every node's processes are ours.

Each node is one `ray start` (the head, then workers joining it with `--address`) started in a
process group of its own, on 127.0.0.1 with its own free ports and temp dir. Ray's daemons of
that node (GCS, raylet, agents) stay in the group; the worker processes its raylet forks start
sessions of their own, so they are found as the group's descendants. `kill(node)` SIGKILLs all
of them at once — a machine lost mid-job; `stop()` kills every node. `ray stop` is never used:
it kills every Ray process on the machine, other users' clusters included.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bertonnx.runtime.core.ports import free_ports

RAY = Path(sys.executable).with_name("ray")  # the ray beside this Python, else on PATH
if not RAY.exists():
    RAY = Path(shutil.which("ray") or RAY)
STORE = 80 << 20  # object store per node (Ray's minimum is 75 MiB): the tests move kilobytes
# for every process of the cluster and its drivers: with RAY_AUTH_MODE unset, Ray turns token
# auth on whenever ~/.ray/auth_token exists (another cluster's), for some processes and not
# others; a cluster the test owns alone on 127.0.0.1 goes without
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


NODE_PORTS = ("--object-manager-port", "--node-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
HEAD_PORTS = ("--port", "--dashboard-port", "--ray-client-server-port")


def _members(group: int) -> list[int]:
    """Processes in process group `group`, and every descendant of one (from /proc)."""
    parent, pgid = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        parent[int(entry)], pgid[int(entry)] = int(fields[1]), int(fields[2])
    found = {p for p, g in pgid.items() if g == group}
    grew = True
    while grew:
        more = {p for p, pp in parent.items() if pp in found} - found
        found |= more
        grew = bool(more)
    return sorted(found)


@dataclass
class LocalCluster:
    root: Path
    groups: dict[str, int] = field(default_factory=dict)  # node name -> process group id
    address: str = ""
    taken: set[int] = field(default_factory=set)  # every port handed to a node of this cluster

    def _start(self, name: str, flags: list[str], cpus: int, env: dict | None,
               named: tuple[str, ...] = ()) -> dict[str, int]:
        """Start node `name`, giving each of NODE_PORTS and `named` a port of its own."""
        drawn = free_ports("127.0.0.1", len(NODE_PORTS + named), avoid=self.taken)
        self.taken.update(drawn)
        ports = dict(zip(NODE_PORTS + named, drawn))
        temp = self.root / name  # short: Ray's socket paths must stay under 108 bytes
        temp.mkdir(parents=True)
        log = open(self.root / f"{name}.log", "wb")
        argv = [str(RAY), "start", *flags, "--node-ip-address", "127.0.0.1",
                "--num-cpus", str(cpus), "--object-store-memory", str(STORE),
                "--min-worker-port", "0", "--max-worker-port", "0", "--temp-dir", str(temp),
                "--disable-usage-stats", *(x for k, v in ports.items() for x in (k, str(v)))]
        # `ray start` returns once the node is up; its processes keep this process group
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **ENV, **(env or {})})
        self.groups[name] = proc.pid
        rc = proc.wait(timeout=120)
        log.close()
        if rc != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n"
                               + (self.root / f"{name}.log").read_text()[-3000:])
        return ports

    def start_head(self, cpus: int, env: dict | None = None) -> str:
        ports = self._start("head", ["--head", "--include-dashboard", "false"], cpus, env,
                            named=HEAD_PORTS)
        self.address = f"127.0.0.1:{ports['--port']}"
        return self.address

    def add_worker(self, name: str, cpus: int, env: dict | None = None) -> None:
        self._start(name, ["--address", self.address], cpus, env)

    def pids(self, name: str = "head") -> list[int]:
        """The processes of node `name`: its daemons and every worker its raylet started."""
        return _members(self.groups[name])

    def kill(self, name: str) -> None:
        group = self.groups.pop(name)
        for pid in _members(group):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        for name in reversed(list(self.groups)):  # workers first, the head last
            self.kill(name)
