"""`calibrate cluster`: Ray clusters for calibrations, on this machine or on Kubernetes.

- `calibrate cluster local up|status|down`: Ray nodes on this machine (`calibrate.cluster.local`).
- `calibrate cluster up|submit|resume|status|logs|down`: a KubeRay RayCluster and RayJobs
  (`calibrate.cluster.manifests`, applied by `calibrate.cluster.kube`).  `--dry-run` on every
  verb prints what it would apply (or, for the verbs that apply nothing, what it would ask) and
  contacts nothing; `--server-dry-run` has the API server validate `up`'s and `submit`'s
  manifests without creating anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from calibrate import installed_version
from calibrate.errors import InputError

DEFAULT_IMAGE = f"calibrate:{installed_version() or 'latest'}"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cluster", help="Ray clusters for calibrations: on this machine, or on Kubernetes (KubeRay)",
        description="Start and stop Ray clusters whose nodes advertise emulator slots: several nodes "
        "on this machine (`local`), or a KubeRay RayCluster on Kubernetes that calibrations are "
        "submitted to as RayJobs.")
    verbs = parser.add_subparsers(dest="cluster_command", metavar="VERB")
    verbs.required = True
    _register_local(verbs)
    _register_kubernetes(verbs)


# ----------------------------------------------------------------------------------------------
# local


def _register_local(verbs: argparse._SubParsersAction) -> None:
    local = verbs.add_parser("local", help="Ray nodes on this machine (or this machine added to a cluster)",
                             description="Start, show or stop Ray nodes on this machine, each advertising "
                             "its emulator slots; token authentication set explicitly on every node.")
    sub = local.add_subparsers(dest="local_command", metavar="ACTION")
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default="default", help="which local cluster (default: %(default)s)")
        p.add_argument("--state-dir", type=Path, metavar="DIR",
                       help="where its state is kept (default: ~/.cache/calibrate/ray-local/NAME)")
        p.add_argument("--json", action="store_true", help="print JSON")

    up = sub.add_parser("up", help="start a head and nodes joining it (or nodes joining --join)")
    common(up)
    up.add_argument("--nodes", type=int, default=1, help="Ray nodes (raylets) to start here (default: 1)")
    up.add_argument("--cpus", type=int, metavar="N",
                    help="CPUs each node advertises (default: this machine's cores shared out)")
    up.add_argument("--slots", type=int, metavar="N",
                    help="emulator slots each node advertises (default: 4 per CPU it advertises)")
    up.add_argument("--port", type=int, default=6379, help="the head's port (default: %(default)s)")
    up.add_argument("--join", metavar="ADDRESS",
                    help="add these nodes to the cluster at ADDRESS (host:port) instead of starting a head")
    up.add_argument("--auth", choices=("token", "disabled"), default="token",
                    help="token authentication of a new cluster (default: token, with ~/.ray/auth_token, "
                         "made if missing); a joining node follows its environment")
    up.add_argument("--no-dashboard", action="store_true",
                    help="no dashboard on the head (then no Ray state API, no `ray job submit`)")
    up.add_argument("--timeout", type=float, default=120.0, metavar="S",
                    help="seconds each node may take to start (default: %(default)s)")
    up.add_argument("--dry-run", action="store_true", help="print the `ray start` commands; start nothing")
    up.set_defaults(func=_local_up)

    status = sub.add_parser("status", help="the local cluster's nodes, as this machine and Ray see them")
    common(status)
    status.set_defaults(func=_local_status)

    down = sub.add_parser("down", help="stop the local cluster's nodes (only those)")
    common(down)
    down.add_argument("--force", action="store_true", help="kill at once instead of letting nodes drain")
    down.add_argument("--dry-run", action="store_true", help="say what would be stopped; stop nothing")
    down.set_defaults(func=_local_down)


def _state_dir(args: argparse.Namespace) -> Path:
    from calibrate.cluster.local import default_state_dir

    return args.state_dir or default_state_dir(args.name)


def _note(text: str) -> None:
    print(f"calibrate: {text}", file=sys.stderr, flush=True)


def _local_up(args: argparse.Namespace) -> int:
    from calibrate.cluster import local

    specs = local.plan(args.nodes, cores=os.cpu_count() or 1, cpus=args.cpus, slots=args.slots,
                       join=args.join is not None, prefix=f"calibrate-{args.name}")
    if args.dry_run:
        address = args.join or f"<head>:{args.port}"
        for spec in specs:
            command = local.start_command(spec, temp_dir=f"/tmp/calibrate-ray-{args.name}",
                                          address=None if spec.head else address, port=args.port,
                                          dashboard_port=None if args.no_dashboard else 8265)
            print(shlex.join(command))
        return 0
    cluster = local.up(args.name, specs, state_dir=_state_dir(args), join=args.join, port=args.port,
                       dashboard=not args.no_dashboard, mode=args.auth, timeout=args.timeout, progress=_note)
    if args.json:
        print(json.dumps(cluster.to_json(), indent=2))
        return 0
    slots = sum(n.slots for n in cluster.nodes)
    print(f"Ray cluster {cluster.name!r} at {cluster.address}: {len(cluster.nodes)} node(s) here, "
          f"{slots} emulator slots, token authentication {'on' if cluster.auth == 'token' else 'off'}")
    print(f"  calibrate run TARGET --address {cluster.address}")
    print("  export " + " ".join(f"{k}={v}" for k, v in cluster.environment().items()) + "   # for `ray status`")
    if cluster.dashboard:
        print(f"  dashboard: {cluster.dashboard}")
    print(f"  calibrate cluster local down --name {cluster.name}")
    return 0


def _local_status(args: argparse.Namespace) -> int:
    from calibrate.cluster import local

    cluster = local.load(_state_dir(args))
    if cluster is None:
        raise InputError(f"no local cluster {args.name!r} (`calibrate cluster local up` starts one)")
    nodes = [{"name": n.name, "pid": n.pid, "alive": n.alive(), "raylet_pid": n.raylet_pid(),
              "cpus": n.cpus, "slots": n.slots, "head": n.head, "log": n.log} for n in cluster.nodes]
    view = local.ray_view(cluster)
    if args.json:
        print(json.dumps({**cluster.to_json(), "nodes": nodes, "ray": view}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"local Ray cluster {cluster.name!r} at {cluster.address} (auth {cluster.auth})",
                  title_justify="left")
    for column in ("node", "role", "process", "raylet", "CPUs", "emulator slots", "Ray says"):
        table.add_column(column)
    states = {v["name"]: v["state"] for v in view or []}
    for n in nodes:
        table.add_row(str(n["name"]), "head" if n["head"] else "worker",
                      f"{n['pid']} {'running' if n['alive'] else 'gone'}", str(n["raylet_pid"] or "–"),
                      str(n["cpus"]), str(n["slots"]), states.get(str(n["name"]), "–"))
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    if view is None and cluster.dashboard:
        print("Ray's state API did not answer (the head may be down)")
    return 0


def _local_down(args: argparse.Namespace) -> int:
    from calibrate.cluster import local

    state_dir = _state_dir(args)
    if args.dry_run:
        cluster = local.load(state_dir)
        if cluster is None:
            raise InputError(f"no local cluster {args.name!r} recorded in {state_dir}")
        for n in sorted(cluster.nodes, key=lambda n: n.head):
            print(f"stop {n.name}: SIGTERM to process {n.pid}, then SIGKILL to its process group")
        return 0
    for line in local.down(state_dir, force=args.force):
        print(line)
    return 0


# ----------------------------------------------------------------------------------------------
# Kubernetes


def _kube_options(p: argparse.ArgumentParser, *, server_dry_run: bool) -> None:
    group = p.add_argument_group("Kubernetes")
    group.add_argument("--name", default="calibrate", help="the RayCluster's name (default: %(default)s)")
    group.add_argument("-n", "--namespace", default="default", help="namespace (default: %(default)s)")
    group.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, "
                                                            "or the pod's service account)")
    group.add_argument("--context", help="kubeconfig context (default: its current one)")
    group.add_argument("--request-timeout", type=float, default=30.0, metavar="S",
                       help="seconds one API request may take (default: %(default)s)")
    if server_dry_run:
        group.add_argument("--dry-run", action="store_const", const="client",
                           help="print the manifests; contact nothing, apply nothing")
        group.add_argument("--server-dry-run", dest="dry_run", action="store_const", const="server",
                           help="have the API server validate the manifests, creating nothing")
    else:
        group.add_argument("--dry-run", action="store_const", const="client",
                           help="print the requests it would make; contact nothing")


def _pod_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("pods")
    group.add_argument("--image", default=DEFAULT_IMAGE,
                       help="the image cluster/Dockerfile built, as pushed (default: %(default)s)")
    group.add_argument("--image-pull-policy", default="IfNotPresent", choices=("Always", "IfNotPresent", "Never"))
    group.add_argument("--image-pull-secret", action="append", default=[], metavar="SECRET",
                       help="a Secret for pulling the image; repeatable")
    group.add_argument("--service-account", metavar="NAME", help="the pods' service account")
    group.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE",
                       help="run only on nodes with this label; repeatable")
    group.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE]:EFFECT",
                       help="tolerate this taint (e.g. dedicated=emulation:NoSchedule; * for all); repeatable")


def _register_kubernetes(verbs: argparse._SubParsersAction) -> None:
    up = verbs.add_parser(
        "up", help="create a KubeRay RayCluster of emulator workers and wait until it is ready",
        description="Create a RayCluster (ray.io/v1) whose workers can run the engine (/dev/net/tun, "
        "NET_ADMIN, SYS_ADMIN and SYS_NICE, or --privileged), each advertising emulator slots, and a "
        "persistent volume claim for run directories mounted on the head at /runs; wait until ready.")
    _kube_options(up, server_dry_run=True)
    _pod_options(up)
    group = up.add_argument_group("sizes")
    group.add_argument("--workers", type=int, default=1, metavar="N", help="worker pods (default: %(default)s)")
    group.add_argument("--min-workers", type=int, metavar="N",
                       help="with --max-workers: let Ray's autoscaler scale between these")
    group.add_argument("--max-workers", type=int, metavar="N")
    group.add_argument("--worker-cpu", default="2", metavar="CPU",
                       help="CPUs each worker requests and advertises to Ray (default: %(default)s)")
    group.add_argument("--worker-memory", default="4Gi", metavar="MEM", help="(default: %(default)s)")
    group.add_argument("--slots-per-worker", type=int, metavar="N",
                       help="emulator slots each worker advertises (default: 4 per CPU)")
    group.add_argument("--head-cpu", default="1", metavar="CPU", help="(default: %(default)s)")
    group.add_argument("--head-memory", default="4Gi", metavar="MEM", help="(default: %(default)s)")
    group.add_argument("--head-slots", type=int, default=0, metavar="N",
                       help="emulator slots on the head too (default: 0: the head runs the drivers only)")
    group = up.add_argument_group("engine and storage")
    group.add_argument("--privileged", action="store_true",
                       help="run the workers privileged instead of with NET_ADMIN, SYS_ADMIN and SYS_NICE")
    group.add_argument("--tun-resource", metavar="NAME",
                       help="a device plugin's resource giving /dev/net/tun (e.g. squat.ai/tun) instead of "
                            "the host's device through a hostPath")
    group.add_argument("--runs-claim", metavar="CLAIM",
                       help="an existing PersistentVolumeClaim for run directories (default: make NAME-runs)")
    group.add_argument("--storage", default="20Gi", metavar="SIZE", help="size of NAME-runs (default: %(default)s)")
    group.add_argument("--storage-class", metavar="CLASS", help="its storage class (default: the cluster's)")
    group.add_argument("--access-mode", default="ReadWriteOnce",
                       choices=("ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"),
                       help="ReadWriteMany also mounts it on the workers (default: %(default)s)")
    group.add_argument("--no-auth", action="store_true", help="no Ray token authentication (not advised)")
    group.add_argument("--timeout", type=float, default=900.0, metavar="S",
                       help="seconds to wait for the cluster to be ready (default: %(default)s)")
    group.add_argument("--no-wait", action="store_true", help="return once created")
    up.set_defaults(func=_up)

    submit = verbs.add_parser(
        "submit", help="run `calibrate run TARGET [run options]` on the cluster as a RayJob; stream its log",
        description="Submit a calibration to the RayCluster made by `up` as a KubeRay RayJob: its driver "
        "runs on the head and writes its run directory under /runs, its emulations run on the workers. "
        "Options of this command come before TARGET; everything after TARGET is `calibrate run`'s.")
    _kube_options(submit, server_dry_run=True)
    _job_options(submit)
    submit.add_argument("target", metavar="TARGET",
                        help="as for `calibrate run`, seen from the head: a bundled name, a result ID, or a "
                             "file on the run-directory volume (/runs/...)")
    submit.add_argument("run_args", nargs=argparse.REMAINDER, metavar="RUN OPTIONS",
                        help="`calibrate run` options (not --address; --out, if given, under /runs)")
    submit.set_defaults(func=_submit, resume=False)

    resume = verbs.add_parser("resume", help="continue a submitted run (`calibrate resume RUN_DIR` as a RayJob)",
                              description="Continue the calibration in RUN_DIR (on the run-directory volume) "
                              "as a RayJob, e.g. after its driver was lost.")
    _kube_options(resume, server_dry_run=True)
    _job_options(resume)
    resume.add_argument("target", metavar="RUN_DIR", help="the run directory, under /runs")
    resume.set_defaults(func=_submit, resume=True, run_args=[])

    status = verbs.add_parser("status", help="the RayCluster, its pods and its calibrations")
    _kube_options(status, server_dry_run=False)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=_status)

    logs = verbs.add_parser("logs", help="the log of a submitted calibration (or of the head)")
    _kube_options(logs, server_dry_run=False)
    logs.add_argument("--job", metavar="NAME", help="the RayJob (default: the head's Ray log)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing as the log grows")
    logs.set_defaults(func=_logs)

    down = verbs.add_parser("down", help="delete what `up` and `submit` made (by their labels), and only that",
                            description="Delete the RayCluster and RayJobs made for --name (found by their "
                            "labels). The run-directory claim is kept unless --delete-storage: it holds "
                            "your results.")
    _kube_options(down, server_dry_run=False)
    down.add_argument("--delete-storage", action="store_true",
                      help="also delete the run-directory claim (and with it every run directory on it)")
    down.set_defaults(func=_down)


def _job_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("the job")
    group.add_argument("--job-name", metavar="NAME", help="the RayJob's name (default: NAME-TARGET-TIME)")
    group.add_argument("--run-name", metavar="DIR", help="the run directory's name under /runs "
                                                         "(default: TARGET-TIME)")
    group.add_argument("--no-follow", action="store_true", help="return once submitted")
    group.add_argument("--timeout", type=float, default=600.0, metavar="S",
                       help="seconds to wait for the job to start (default: %(default)s)")
    group.add_argument("--image", default=DEFAULT_IMAGE,
                       help="with --dry-run only: the image (otherwise the cluster's is used)")


def _cluster_options(args: argparse.Namespace):
    from calibrate.cluster import manifests as m

    return m.ClusterOptions(
        name=args.name, namespace=args.namespace, image=args.image, image_pull_policy=args.image_pull_policy,
        image_pull_secrets=tuple(args.image_pull_secret), service_account=args.service_account,
        node_selector=m.parse_pairs(args.node_selector, "--node-selector"),
        tolerations=tuple(m.parse_toleration(t) for t in args.toleration),
        head_cpu=args.head_cpu, head_memory=args.head_memory, head_slots=args.head_slots,
        worker_cpu=args.worker_cpu, worker_memory=args.worker_memory, replicas=args.workers,
        min_replicas=args.min_workers, max_replicas=args.max_workers, slots_per_worker=args.slots_per_worker,
        privileged=args.privileged, tun_resource=args.tun_resource, runs_claim=args.runs_claim,
        storage=args.storage, storage_class=args.storage_class, access_mode=args.access_mode,
        auth=not args.no_auth).check()


def _print_manifests(*docs: dict[str, Any]) -> None:
    import yaml

    print(yaml.safe_dump_all(docs, sort_keys=False, width=1000), end="")


def _connect(args: argparse.Namespace):
    from calibrate.cluster.kube import Kube

    return Kube.connect(args.namespace, kubeconfig=args.kubeconfig, context=args.context,
                        request_timeout=args.request_timeout)


class _Progress:
    """Readiness on a terminal as a live line with a bar; elsewhere one line per change."""

    def __init__(self, what: str) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.what = what
        self.progress: Any = None
        self.task: Any = None

    def __enter__(self) -> _Progress:
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total} workers"), TimeElapsedColumn(),
                                     console=self.console, transient=False)
            self.progress.__enter__()
            self.task = self.progress.add_task(self.what, total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress:
            self.progress.__exit__(*exc)

    def __call__(self, readiness: Any) -> None:
        if self.progress:
            self.progress.update(self.task, description=f"{self.what}: {readiness.text()}",
                                 completed=readiness.ready_workers, total=max(readiness.desired_workers, 1))
        else:
            _note(f"{self.what}: {readiness.text()}")


def _up(args: argparse.Namespace) -> int:
    from calibrate.cluster import manifests as m
    from calibrate.cluster.kube import KubernetesError

    options = _cluster_options(args)
    docs = ([] if options.runs_claim else [m.runs_claim(options)]) + [m.ray_cluster(options)]
    if args.dry_run == "client":
        _print_manifests(*docs)
        return 0
    kube = _connect(args)
    server_dry_run = args.dry_run == "server"
    for doc in docs:
        try:
            kube.create(doc, server_dry_run=server_dry_run)
        except KubernetesError as e:
            if doc["kind"] != "PersistentVolumeClaim" or e.status != 409:
                raise
            _note(f"reusing PersistentVolumeClaim {doc['metadata']['name']} (kept by an earlier `down`)")
            continue
        _note(f"{'validated (not created)' if server_dry_run else 'created'} {doc['kind']} "
              f"{options.namespace}/{doc['metadata']['name']}")
    if server_dry_run or args.no_wait:
        return 0
    started = time.monotonic()
    with _Progress(f"RayCluster {options.name}") as progress:
        kube.wait_ready(options.name, args.timeout, progress)
    slots = options.slots * options.replicas + options.head_slots
    print(f"RayCluster {options.namespace}/{options.name} ready in {time.monotonic() - started:.0f} s: "
          f"{options.replicas} worker(s), {slots} emulator slots; run directories on "
          f"{options.claim} at {m.RUNS_MOUNT}")
    print(f"  calibrate cluster submit --name {options.name} --namespace {options.namespace} TARGET [run options]")
    return 0


#: submit's own options, which must come before TARGET (none of them is also `calibrate run`'s)
SUBMIT_OPTIONS = {"--dry-run", "--server-dry-run", "--name", "-n", "--namespace", "--kubeconfig", "--context",
                  "--request-timeout", "--job-name", "--run-name", "--no-follow", "--timeout", "--image"}


def _check_run_args(args: argparse.Namespace) -> None:
    """`calibrate run`'s own parser checks the options here, before anything is submitted."""
    if args.resume:
        return
    if os.path.exists(args.target) and not args.target.startswith("/runs/"):
        raise InputError(f"{args.target} is a file on this machine, but the calibration runs in the "
                         f"cluster: copy it onto the run-directory volume (`kubectl cp {args.target} "
                         f"{args.namespace}/<head pod>:/runs/targets/`) and submit /runs/targets/...")
    misplaced = sorted({a.split("=", 1)[0] for a in args.run_args} & SUBMIT_OPTIONS)
    if misplaced:
        raise InputError(f"{', '.join(misplaced)}: an option of `calibrate cluster submit`, given after TARGET "
                         f"where `calibrate run`'s options go: give it before TARGET")
    from calibrate.cli import build_parser

    try:
        build_parser().parse_args(["run", args.target, *args.run_args])
    except SystemExit as e:  # argparse has printed what is wrong
        raise InputError("the run options above are not `calibrate run`'s (see `calibrate run --help`)") from e


def _submit(args: argparse.Namespace) -> int:
    from calibrate.cluster import manifests as m

    _check_run_args(args)
    kube = None
    if args.dry_run == "client":
        options = replace(m.ClusterOptions(), name=args.name, namespace=args.namespace, image=args.image)
    else:
        kube = _connect(args)
        options = m.ClusterOptions.of_cluster(kube.get(m.CLUSTERS, args.name))
    job = m.JobOptions(options, args.target, tuple(args.run_args), resume=args.resume,
                       run_name=args.run_name, job_name=args.job_name)
    manifest = m.ray_job(job)
    if kube is None:
        _print_manifests(manifest)
        return 0
    kube.create(manifest, server_dry_run=args.dry_run == "server")
    if args.dry_run == "server":
        _note(f"validated (not created) RayJob {args.namespace}/{job.name}")
        return 0
    _note(f"submitted RayJob {args.namespace}/{job.name}: {manifest['spec']['entrypoint']}")
    _note(f"run directory: {job.out} (on the head; `calibrate cluster logs --job {job.name}` for its log)")
    if args.no_follow:
        return 0
    pod = kube.job_pod(job.name, args.timeout, _note)
    for line in kube.log_lines(pod, follow=True):
        print(line, flush=True)
    status = kube.wait_job_done(job.name, 60.0)
    outcome = status.get("jobStatus") or status.get("jobDeploymentStatus") or "unknown"
    _note(f"RayJob {job.name}: {outcome}" + (f" ({status['message']})" if status.get("message") else ""))
    if outcome != "SUCCEEDED":
        _note(f"continue it with `calibrate cluster resume --name {args.name} {job.out}`")
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    from calibrate.cluster import manifests as m
    from calibrate.cluster.kube import Readiness, pod_problem

    if args.dry_run:
        base = f"/apis/{m.GROUP}/{m.VERSION}/namespaces/{args.namespace}"
        print(f"GET {base}/{m.CLUSTERS}/{args.name}")
        print(f"GET /api/v1/namespaces/{args.namespace}/pods?labelSelector={m.RAY_CLUSTER_LABEL}={args.name}")
        print(f"GET {base}/{m.JOBS}?labelSelector={m.selector_of(args.name)}")
        return 0
    kube = _connect(args)
    cluster = kube.get(m.CLUSTERS, args.name)
    pods = kube.list_items("pods", f"{m.RAY_CLUSTER_LABEL}={args.name}")
    jobs = kube.list_items(m.JOBS, m.selector_of(args.name))
    readiness = Readiness.of(cluster)
    rows = [{"pod": p["metadata"]["name"], "type": p["metadata"].get("labels", {}).get(m.RAY_NODE_TYPE_LABEL, ""),
             "phase": (p.get("status") or {}).get("phase", ""), "problem": pod_problem(p)} for p in pods]
    runs = [{"job": j["metadata"]["name"], "run_directory": j["metadata"].get("annotations", {}).get(
                "calibrate/run-directory", ""),
             "deployment": (j.get("status") or {}).get("jobDeploymentStatus", ""),
             "ray_job": (j.get("status") or {}).get("jobStatus", "")} for j in jobs]
    if args.json:
        print(json.dumps({"name": args.name, "namespace": args.namespace, "ready": readiness.ready,
                          "readiness": readiness.text(), "status": cluster.get("status") or {},
                          "pods": rows, "jobs": runs}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"RayCluster {args.namespace}/{args.name}: {'ready' if readiness.ready else 'not ready'} "
                  f"({readiness.text()})", highlight=False)
    table = Table(title="pods", title_justify="left")
    for column in ("pod", "type", "phase", "problem"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)
    if runs:
        table = Table(title="calibrations", title_justify="left")
        for column in ("RayJob", "run directory", "deployment", "Ray job"):
            table.add_column(column)
        for row in runs:
            table.add_row(*(str(v) for v in row.values()))
        console.print(table)
    return 0


def _logs(args: argparse.Namespace) -> int:
    from calibrate.cluster import manifests as m

    head_selector = f"{m.RAY_CLUSTER_LABEL}={args.name},{m.RAY_NODE_TYPE_LABEL}=head"
    if args.dry_run:
        selector = f"job-name={args.job}" if args.job else head_selector
        print(f"GET /api/v1/namespaces/{args.namespace}/pods?labelSelector={selector}")
        print(f"GET /api/v1/namespaces/{args.namespace}/pods/<pod>/log" + ("?follow=true" if args.follow else ""))
        return 0
    kube = _connect(args)
    if args.job:
        pod, container = kube.job_pod(args.job, 60.0, None), None
    else:
        pods = kube.list_items("pods", head_selector)
        if not pods:
            raise InputError(f"no head pod of RayCluster {args.name} in namespace {args.namespace} "
                             f"(`calibrate cluster status`)")
        pod, container = pods[0]["metadata"]["name"], "ray-head"
    for line in kube.log_lines(pod, container=container, follow=args.follow):
        print(line, flush=True)
    return 0


def _down(args: argparse.Namespace) -> int:
    from calibrate.cluster import manifests as m

    if args.dry_run:
        selector = m.selector_of(args.name)
        kinds = [f"/apis/{m.GROUP}/{m.VERSION}/namespaces/{args.namespace}/{m.JOBS}",
                 f"/apis/{m.GROUP}/{m.VERSION}/namespaces/{args.namespace}/{m.CLUSTERS}"]
        if args.delete_storage:
            kinds.append(f"/api/v1/namespaces/{args.namespace}/persistentvolumeclaims")
        for path in kinds:
            print(f"DELETE each of GET {path}?labelSelector={selector}")
        return 0
    deleted, kept = _connect(args).delete_made(args.name, storage=args.delete_storage)
    if not deleted:
        print(f"nothing made by calibrate for cluster {args.name!r} in namespace {args.namespace}")
    for item in deleted:
        print(f"deleted {item}")
    for item in kept:
        print(f"kept {item} (your run directories; --delete-storage deletes it)")
    return 0
