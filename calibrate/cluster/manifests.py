"""KubeRay manifests for calibrations: a RayCluster of emulator workers, the claim its run
directories live on, and a RayJob per calibration (ray.io/v1, KubeRay 1.7).  Pure functions of
frozen options; `calibrate.cluster.kube` applies them.

The cluster:
- **head**: GCS, dashboard and the drivers of submitted calibrations (a RayJob's entrypoint
  runs on the head), so it mounts the run-directory claim at ``/runs``; by default it advertises
  no CPU and no emulator slot, so no emulation runs beside the drivers.
- **workers** (one group, `replicas` pods, between `min_replicas` and `max_replicas` when the
  autoscaler is on): each advertises ``emulator_slot`` = `SLOTS_PER_CORE` × its CPU request
  (``--slots-per-worker`` overrides) and ``num-cpus`` = its CPU request, which the tasks' CPU
  shares are counted against (`calibrate.evaluation`).  The engine creates network namespaces
  and TUN devices and sets, inside each namespace it creates, Pantheon's socket buffers
  (``net.ipv4.tcp_rmem``/``tcp_wmem``, `ENGINE_SYSCTLS`) and ``disable_ipv6``; so a worker gets
  ``/dev/net/tun`` (the host's device, or a device plugin's resource with ``--tun-resource``),
  the NET_ADMIN, SYS_ADMIN and SYS_NICE capabilities (SYS_NICE: the engine's real-time
  priority) or, with ``--privileged``, everything.  Pod-level ``sysctls`` would not help: they
  tune the pod's own namespace, and a new namespace takes its values from the host's initial
  one; what the engine needs is a writable ``/proc/sys``, which a container without
  ``--privileged`` does not have (the runtime mounts it read-only).  The workers' postStart hook
  remounts it read-write (allowed by SYS_ADMIN with AppArmor unconfined) and checks, in a
  throw-away namespace, that the engine's sysctls can be set — a node that cannot run the
  engine fails at start with that message instead of failing every task.  CPU is requested,
  not limited: a CFS quota throttles the engine's real-time loop in bursts, which distorts
  the emulation.
- **token authentication**: ``authOptions: {mode: token}``; the operator makes a Secret with a
  random token and gives every Ray container (and a RayJob's submitter) ``RAY_AUTH_MODE`` and
  ``RAY_AUTH_TOKEN`` (`calibrate.cluster.auth`).
- every object carries `labels_of`, which is how `down` finds what `up` created, and only that.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from calibrate.errors import InputError
from calibrate.evaluation import SLOT, SLOTS_PER_CORE

GROUP = "ray.io"
VERSION = "v1"
CLUSTERS = "rayclusters"
JOBS = "rayjobs"
RAY_VERSION = "2.60.0"

MANAGED_BY = "app.kubernetes.io/managed-by"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
MANAGER = "calibrate"
#: KubeRay's own labels on what it creates for a cluster
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"

RUNS_MOUNT = "/runs"
WORKER_GROUP = "emulators"
#: what the engine writes inside each namespace it creates (emulators/src/netns.rs)
ENGINE_SYSCTLS = {"net.ipv4.tcp_rmem": "4096 87380 4194304",  # Linux >= 6.6 (netns.rs: 6 MiB before)
                  "net.ipv4.tcp_wmem": "4096 16384 4194304"}
ENGINE_CAPABILITIES = ("NET_ADMIN", "SYS_ADMIN", "SYS_NICE")
ACCESS_MODES = ("ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")


def labels_of(name: str, component: str) -> dict[str, str]:
    """The labels of everything made for the cluster `name` (`down`'s selector is the first two)."""
    return {MANAGED_BY: MANAGER, INSTANCE: name, COMPONENT: component}


def selector_of(name: str) -> str:
    return f"{MANAGED_BY}={MANAGER},{INSTANCE}={name}"


def check_name(name: str, what: str, limit: int = 40) -> str:
    if not _DNS_LABEL.match(name) or len(name) > limit:
        raise InputError(f"{what} {name!r}: use lower-case letters, digits and '-', starting and "
                         f"ending with a letter or digit, at most {limit} characters")
    return name


def check_quantity(value: str, what: str) -> str:
    if not _QUANTITY.match(value):
        raise InputError(f"{what} {value!r}: not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    return value


def cpu_count(quantity: str) -> float:
    """CPUs in a Kubernetes CPU quantity ("2", "1500m")."""
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def parse_toleration(text: str) -> dict[str, str]:
    """``KEY[=VALUE]:EFFECT`` (kubectl taint's syntax) or ``KEY:EFFECT``; ``*`` tolerates all."""
    if text == "*":
        return {"operator": "Exists"}
    spec, sep, effect = text.rpartition(":")
    if not sep or effect not in TAINT_EFFECTS:
        raise InputError(f"--toleration {text!r}: expected KEY[=VALUE]:EFFECT with EFFECT one of "
                         f"{', '.join(TAINT_EFFECTS)}, e.g. dedicated=emulation:NoSchedule")
    key, has_value, value = spec.partition("=")
    if not key:
        raise InputError(f"--toleration {text!r}: the taint's key is empty")
    out = {"key": key, "operator": "Equal" if has_value else "Exists", "effect": effect}
    if has_value:
        out["value"] = value
    return out


def parse_pairs(items: Sequence[str], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{option} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


@dataclass(frozen=True)
class ClusterOptions:
    """What `calibrate cluster up` makes (the CLI's flags, one field each)."""

    name: str = "calibrate"
    namespace: str = "default"
    image: str = "calibrate:latest"
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()
    head_cpu: str = "1"
    head_memory: str = "4Gi"
    head_slots: int = 0
    worker_cpu: str = "2"
    worker_memory: str = "4Gi"
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    slots_per_worker: int | None = None
    privileged: bool = False
    tun_resource: str | None = None  # a device plugin's resource for /dev/net/tun, else the host's device
    runs_claim: str | None = None  # an existing claim for /runs; None: up makes `<name>-runs`
    storage: str = "20Gi"
    storage_class: str | None = None
    access_mode: str = "ReadWriteOnce"
    auth: bool = True
    ray_version: str = RAY_VERSION

    def check(self) -> ClusterOptions:
        check_name(self.name, "--name")
        check_name(self.namespace, "--namespace", 63)
        for value, what in ((self.head_cpu, "--head-cpu"), (self.head_memory, "--head-memory"),
                            (self.worker_cpu, "--worker-cpu"), (self.worker_memory, "--worker-memory"),
                            (self.storage, "--storage")):
            check_quantity(value, what)
        if cpu_count(self.worker_cpu) < 1:
            raise InputError(f"--worker-cpu {self.worker_cpu}: a worker needs at least one CPU "
                             "(a task may ask for a whole core at high rates)")
        if self.replicas < 0 or self.min_bound < 0 or self.max_bound < self.min_bound:
            raise InputError(f"worker replicas: need 0 <= --min-replicas ({self.min_bound}) <= "
                             f"--replicas ({self.replicas}) <= --max-replicas ({self.max_bound})")
        if not self.min_bound <= self.replicas <= self.max_bound:
            raise InputError(f"--replicas {self.replicas} is outside --min-replicas "
                             f"{self.min_bound} .. --max-replicas {self.max_bound}")
        if self.slots < 1:
            raise InputError(f"--slots-per-worker must be at least 1, got {self.slots}")
        if self.head_slots < 0:
            raise InputError(f"--head-slots must be 0 or more, got {self.head_slots}")
        if self.access_mode not in ACCESS_MODES:
            raise InputError(f"--access-mode must be one of {', '.join(ACCESS_MODES)}")
        if self.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise InputError("--image-pull-policy must be Always, IfNotPresent or Never")
        return self

    @property
    def min_bound(self) -> int:
        return self.replicas if self.min_replicas is None else self.min_replicas

    @property
    def max_bound(self) -> int:
        return self.replicas if self.max_replicas is None else self.max_replicas

    @property
    def autoscaling(self) -> bool:
        return self.max_bound > self.min_bound

    @property
    def slots(self) -> int:
        """Emulator slots per worker: `SLOTS_PER_CORE` per requested core unless overridden."""
        if self.slots_per_worker is not None:
            return self.slots_per_worker
        return max(1, int(SLOTS_PER_CORE * cpu_count(self.worker_cpu)))

    @property
    def claim(self) -> str:
        return self.runs_claim or f"{self.name}-runs"

    @property
    def max_slots(self) -> int:
        """Emulator slots of the cluster at its largest."""
        return self.slots * self.max_bound + self.head_slots

    @classmethod
    def of_cluster(cls, cluster: Mapping[str, Any]) -> ClusterOptions:
        """What `submit` needs to know of a live RayCluster: its pods' image and placement (a
        submitter pod runs like them) and its sizes."""
        pod = cluster["spec"]["headGroupSpec"]["template"]["spec"]
        container = pod["containers"][0]
        groups = cluster["spec"].get("workerGroupSpecs") or []
        replicas = sum(int(g.get("replicas", 0)) for g in groups)
        low = sum(int(g.get("minReplicas", 0)) for g in groups)
        high = sum(int(g.get("maxReplicas", g.get("replicas", 0))) for g in groups)
        slots = [_slots_of(g.get("rayStartParams") or {}) for g in groups]
        return cls(name=cluster["metadata"]["name"], namespace=cluster["metadata"].get("namespace", "default"),
                   image=container["image"], image_pull_policy=container.get("imagePullPolicy", "IfNotPresent"),
                   image_pull_secrets=tuple(s["name"] for s in pod.get("imagePullSecrets") or []),
                   service_account=pod.get("serviceAccountName"), node_selector=dict(pod.get("nodeSelector") or {}),
                   tolerations=tuple(pod.get("tolerations") or ()), replicas=replicas,
                   slots_per_worker=max(slots, default=1) or 1,
                   head_slots=_slots_of(cluster["spec"]["headGroupSpec"].get("rayStartParams") or {}),
                   min_replicas=low, max_replicas=high)


def _resources_param(resources: Mapping[str, float | int]) -> str:
    """A `ray start --resources` value as rayStartParams carries it (KubeRay pastes it into a
    shell command line: JSON in double quotes)."""
    return json.dumps(json.dumps(dict(resources), separators=(",", ":")))


def _slots_of(start_params: Mapping[str, str]) -> int:
    """The emulator slots a group's rayStartParams advertise (`_resources_param` read back)."""
    try:
        value = json.loads(start_params.get("resources", '"{}"'))
        return int(json.loads(value).get(SLOT, 0) if isinstance(value, str) else value.get(SLOT, 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _pod_common(o: ClusterOptions) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if o.service_account:
        spec["serviceAccountName"] = o.service_account
    if o.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in o.image_pull_secrets]
    if o.node_selector:
        spec["nodeSelector"] = dict(o.node_selector)
    if o.tolerations:
        spec["tolerations"] = [dict(t) for t in o.tolerations]
    return spec


def engine_check() -> str:
    """The postStart command: make /proc/sys writable (not needed when privileged, harmless),
    then set the engine's sysctls in a throw-away namespace, as the engine will."""
    writes = " && ".join(f"echo '{value}' > /proc/sys/{key.replace('.', '/')}"
                         for key, value in ENGINE_SYSCTLS.items())
    return (f"mount -o remount,rw /proc/sys 2>/dev/null; test -c /dev/net/tun "
            f"|| {{ echo 'no /dev/net/tun in this container' >&2; exit 1; }}; "
            f"unshare --net sh -c \"{writes}\" "
            f"|| {{ echo 'cannot set the engine sysctls in a new network namespace: give the "
            f"workers SYS_ADMIN with AppArmor unconfined, or --privileged' >&2; exit 1; }}")


def _engine_security(o: ClusterOptions) -> dict[str, Any]:
    if o.privileged:
        return {"privileged": True, "runAsUser": 0}
    return {"runAsUser": 0, "capabilities": {"add": list(ENGINE_CAPABILITIES)},
            # runtime/default AppArmor denies mount, which the postStart remount needs
            "appArmorProfile": {"type": "Unconfined"}}


def _engine_container(o: ClusterOptions, name: str, cpu: str, memory: str) -> tuple[dict[str, Any], list]:
    """A container that runs emulations, and the volumes it needs."""
    limits: dict[str, Any] = {"memory": memory}
    mounts = [{"name": "scratch", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {}}]
    if o.tun_resource:
        limits[o.tun_resource] = 1
    elif not o.privileged:  # privileged containers see the host's /dev
        mounts.append({"name": "dev-net-tun", "mountPath": "/dev/net/tun"})
        volumes.append({"name": "dev-net-tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}})
    container = {
        "name": name, "image": o.image, "imagePullPolicy": o.image_pull_policy,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
        "securityContext": _engine_security(o),
        "volumeMounts": mounts,
        "lifecycle": {"postStart": {"exec": {"command": ["/bin/sh", "-c", engine_check()]}}},
    }
    return container, volumes


def ray_cluster(o: ClusterOptions) -> dict[str, Any]:
    """The RayCluster (ray.io/v1) for `o`."""
    o.check()
    labels = labels_of(o.name, "ray-cluster")
    runs_volume = {"name": "runs", "persistentVolumeClaim": {"claimName": o.claim}}
    runs_mount = {"name": "runs", "mountPath": RUNS_MOUNT}

    head_start = {"dashboard-host": "0.0.0.0", "num-cpus": str(int(cpu_count(o.head_cpu)) if o.head_slots else 0)}
    if o.head_slots:
        head_start["resources"] = _resources_param({SLOT: o.head_slots})
        head_container, head_volumes = _engine_container(o, "ray-head", o.head_cpu, o.head_memory)
    else:
        head_container = {"name": "ray-head", "image": o.image, "imagePullPolicy": o.image_pull_policy,
                          "resources": {"requests": {"cpu": o.head_cpu, "memory": o.head_memory},
                                        "limits": {"memory": o.head_memory}},
                          "securityContext": {"runAsUser": 0}, "volumeMounts": []}
        head_volumes = []
    head_container["ports"] = [{"containerPort": 6379, "name": "gcs-server"},
                               {"containerPort": 8265, "name": "dashboard"},
                               {"containerPort": 10001, "name": "client"}]
    head_container["volumeMounts"] = [*head_container["volumeMounts"], runs_mount]
    head_container["env"] = [{"name": "CALIBRATE_RUNS", "value": RUNS_MOUNT}]
    head = {
        "rayStartParams": head_start,
        "template": {"metadata": {"labels": dict(labels)},
                     "spec": {**_pod_common(o), "containers": [head_container],
                              "volumes": [*head_volumes, runs_volume]}},
    }

    worker_container, worker_volumes = _engine_container(o, "ray-worker", o.worker_cpu, o.worker_memory)
    if o.access_mode == "ReadWriteMany":  # the run directories, where every pod may mount them
        worker_container["volumeMounts"].append(runs_mount)
        worker_volumes.append(runs_volume)
    worker = {
        "groupName": WORKER_GROUP,
        "replicas": o.replicas, "minReplicas": o.min_bound, "maxReplicas": o.max_bound,
        "rayStartParams": {"num-cpus": str(int(cpu_count(o.worker_cpu))),
                           "resources": _resources_param({SLOT: o.slots})},
        "template": {"metadata": {"labels": dict(labels)},
                     "spec": {**_pod_common(o), "containers": [worker_container], "volumes": worker_volumes}},
    }
    spec: dict[str, Any] = {"rayVersion": o.ray_version, "headGroupSpec": head, "workerGroupSpecs": [worker]}
    if o.autoscaling:
        spec["enableInTreeAutoscaling"] = True
    if o.auth:
        spec["authOptions"] = {"mode": "token"}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RayCluster",
            "metadata": {"name": o.name, "namespace": o.namespace, "labels": labels}, "spec": spec}


def runs_claim(o: ClusterOptions) -> dict[str, Any]:
    """The PersistentVolumeClaim for run directories (made by `up` unless --runs-claim names one)."""
    spec: dict[str, Any] = {"accessModes": [o.access_mode], "resources": {"requests": {"storage": o.storage}}}
    if o.storage_class:
        spec["storageClassName"] = o.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": o.claim, "namespace": o.namespace, "labels": labels_of(o.name, "runs")},
            "spec": spec}


@dataclass(frozen=True)
class JobOptions:
    """A calibration submitted to a cluster made by `up` (`calibrate cluster submit`)."""

    cluster: ClusterOptions
    target: str  # TARGET of `calibrate run`; with `resume`, the run directory to continue
    run_args: tuple[str, ...] = ()  # `calibrate run` options after TARGET
    resume: bool = False
    run_name: str | None = None  # the run directory under /runs; default <target>-<UTC time>
    job_name: str | None = None
    now: dt.datetime | None = None  # for names (tests pass a fixed time)

    def stamp(self) -> str:
        return (self.now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")

    def stem(self) -> str:
        stem = re.sub(r"[^a-z0-9-]+", "-", PurePosixPath(self.target.rstrip("/")).name.lower()).strip("-")
        return stem[:16].strip("-") or "target"

    @property
    def name(self) -> str:
        default = f"{self.cluster.name}-{self.stem()}-{self.stamp().lower()}"[:52].rstrip("-")
        return check_name(self.job_name or default, "--job-name", 52)

    @property
    def out(self) -> str:
        if self.resume:
            return self.target
        given = _option_value(self.run_args, "--out")
        if given is not None:
            return given
        return f"{RUNS_MOUNT}/{self.run_name or f'{self.stem()}-{self.stamp()}'}"

    def entrypoint(self) -> list[str]:
        if self.resume:
            return ["calibrate", "resume", self.target, "--quiet"]
        args = list(self.run_args)
        if _option_value(args, "--out") is None:
            args += ["--out", self.out]
        if "--quiet" not in args:
            args.append("--quiet")
        if self.cluster.autoscaling and _option_value(args, "--slots") is None:
            # keep as many runs in flight as the cluster can grow to: its autoscaler adds workers
            # only for tasks that wait for a slot
            args += ["--slots", str(self.cluster.max_slots)]
        return ["calibrate", "run", self.target, *args]


def _option_value(args: Sequence[str], option: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def ray_job(j: JobOptions) -> dict[str, Any]:
    """The RayJob that runs `calibrate run` as a Ray job on the existing cluster: its driver
    runs on the head (run directory on the claim at /runs), its tasks on the workers; the
    submitter pod KubeRay starts follows the job's log."""
    o = j.cluster.check()
    out = j.out
    if not PurePosixPath(out).is_absolute() or not out.startswith(RUNS_MOUNT + "/"):
        what = "RUN_DIR" if j.resume else "--out"
        raise InputError(f"{what} {out}: a submitted run's directory is on the run-directory volume, "
                         f"under {RUNS_MOUNT}/, e.g. {RUNS_MOUNT}/my-run")
    if _option_value(j.run_args, "--address") is not None:
        raise InputError("--address: a submitted run uses the cluster it is submitted to; leave it out")
    labels = labels_of(o.name, "calibration")
    submitter = {"name": "ray-job-submitter", "image": o.image, "imagePullPolicy": o.image_pull_policy,
                 "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RayJob",
        "metadata": {"name": j.name, "namespace": o.namespace, "labels": labels,
                     "annotations": {"calibrate/run-directory": out}},
        "spec": {
            "entrypoint": shlex.join(j.entrypoint()),
            "clusterSelector": {RAY_CLUSTER_LABEL: o.name},
            "submissionMode": "K8sJobMode",
            # a calibration is resumed (`calibrate resume`), never started again from scratch
            "backoffLimit": 0,
            "submitterPodTemplate": {"metadata": {"labels": dict(labels)},
                                     "spec": {**_pod_common(o), "restartPolicy": "Never",
                                              "containers": [submitter]}},
        },
    }


__all__ = ["CLUSTERS", "ENGINE_SYSCTLS", "GROUP", "JOBS", "RUNS_MOUNT", "VERSION", "ClusterOptions",
           "JobOptions", "engine_check", "labels_of", "parse_pairs", "parse_toleration", "ray_cluster", "ray_job",
           "runs_claim", "selector_of"]
