"""The Kubernetes side of `calibrate cluster`: apply, watch, read and delete the manifests of
`calibrate.cluster.manifests` through the official `kubernetes` client.

Every call goes through `Kube._api`, which turns what the API server (or the network) says into
one `KubernetesError` whose message names the fix: 401 (credentials), 403 (RBAC), 404 (a missing
KubeRay CRD, namespace or object: told apart by the body of the answer), 409 (the name is
taken), 422 (the manifest is invalid: the fields and the server's reasons), 5xx, timeouts and
unreachable servers.  Requests are not retried behind the caller's back (a command says what
failed, the person retries), and each has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from calibrate.cluster import manifests as m
from calibrate.errors import EnvironmentProblem

#: the answer's kind as a person reads it, per resource
KINDS = {m.CLUSTERS: "RayCluster", m.JOBS: "RayJob", "persistentvolumeclaims": "PersistentVolumeClaim",
         "pods": "Pod", "pods/log": "Pod log"}
KUBERAY_INSTALL = ("install the KubeRay operator, which brings its CRDs (KubeRay 1.7: `helm repo add kuberay "
                   "https://ray-project.github.io/kuberay-helm/ && helm install kuberay-operator "
                   "kuberay/kuberay-operator --version 1.7.0`), then retry")
RBAC = ("calibrate cluster needs get, list, watch, create and delete on rayclusters.ray.io, "
        "rayjobs.ray.io, persistentvolumeclaims and pods, and get on pods/log")
#: a RayJob is over when its deployment status is one of these
JOB_DONE = ("Complete", "Failed")


class KubernetesError(EnvironmentProblem):
    """The API server refused or did not answer; the message says what to do."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of the answer; None: no answer


@dataclass(frozen=True)
class Readiness:
    """A RayCluster's progress towards ready, from its status."""

    state: str  # KubeRay's status.state ("" before the operator has seen it)
    head_ready: bool
    ready_workers: int
    desired_workers: int
    reason: str

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self.head_ready and self.ready_workers >= self.desired_workers

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    def text(self) -> str:
        head = "ready" if self.head_ready else "starting"
        return (f"state {self.state or 'pending'}, head {head}, workers {self.ready_workers}/"
                f"{self.desired_workers} ready" + (f" ({self.reason})" if self.reason else ""))

    @classmethod
    def of(cls, cluster: Mapping[str, Any]) -> Readiness:
        status = cluster.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        head = conditions.get("HeadPodReady")
        head_ready = (head.get("status") == "True") if head else status.get("state") == "ready"
        desired = status.get("desiredWorkerReplicas")
        if desired is None:  # before the operator's first status: what the spec asks for
            desired = sum(int(g.get("replicas", 0)) for g in cluster.get("spec", {}).get("workerGroupSpecs", []))
        reason = status.get("reason") or next(
            (c.get("message", "") for c in conditions.values() if c.get("status") == "False" and c.get("message")), "")
        return cls(str(status.get("state") or ""), bool(head_ready), int(status.get("readyWorkerReplicas") or 0),
                   int(desired), str(reason))


def _json(response: Any) -> dict[str, Any]:
    """The JSON of a raw answer (`_preload_content=False`): the core API's typed models
    refuse objects that lack fields they require, which is not this code's business."""
    try:
        data = json.loads(response.data or b"{}")
    finally:
        response.release_conn()
    return data if isinstance(data, dict) else {}


def _body(error: Any) -> dict[str, Any]:
    try:
        data = json.loads(error.body or "")
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Kube:
    """One API server, one namespace."""

    def __init__(self, api_client: Any, namespace: str, request_timeout: float = 30.0) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.namespace = namespace
        self.request_timeout = request_timeout
        # typed as Any: the client's models are not worth mirroring for the few calls made here
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)

    @classmethod
    def connect(cls, namespace: str, *, kubeconfig: str | None = None, context: str | None = None,
                request_timeout: float = 30.0) -> Kube:
        """The kubeconfig's (``--kubeconfig``, else $KUBECONFIG, else ~/.kube/config), or, inside
        a pod with none of those, the pod's service account."""
        try:
            from kubernetes import client, config
        except ImportError as e:
            raise EnvironmentProblem("`calibrate cluster` needs the kubernetes client: "
                                     "`pip install kubernetes`") from e
        configuration = client.Configuration()
        configuration.retries = 0  # say what failed; the person retries
        try:
            in_pod = (kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ
                      and not os.environ.get("KUBECONFIG")
                      and not os.path.exists(os.path.expanduser("~/.kube/config")))
            if in_pod:
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=kubeconfig, context=context,
                                        client_configuration=configuration, persist_config=False)
        except (config.ConfigException, OSError, ValueError) as e:
            raise KubernetesError(
                f"no usable Kubernetes configuration ({e}): point --kubeconfig or $KUBECONFIG at "
                f"your cluster's kubeconfig (and --context at its context), or run inside a pod "
                f"with a service account") from None
        return cls(client.ApiClient(configuration), namespace, request_timeout)

    @property
    def server(self) -> str:
        return str(self.api_client.configuration.host)

    # -- errors

    @contextlib.contextmanager
    def _api(self, action: str, resource: str, name: str | None = None) -> Iterator[None]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except ApiException as e:
            raise self.explain(e, action, resource, name) from None
        except (HTTPError, OSError) as e:
            raise self.unreachable(e, action) from None

    def explain(self, error: Any, action: str, resource: str, name: str | None = None) -> KubernetesError:
        """The error for an API error answer (`error`: the client's ApiException)."""
        explained = self._explain(error, action, resource, name)
        explained.status = int(error.status or 0)
        return explained

    def _explain(self, error: Any, action: str, resource: str, name: str | None) -> KubernetesError:
        status = int(error.status or 0)
        body = _body(error)
        message = str(body.get("message") or error.reason or "").strip()
        details = body.get("details") or {}
        kind = KINDS.get(resource, resource)
        ns = self.namespace
        what = f"{kind} {name!r}" if name else kind
        if status == 401:
            return KubernetesError(
                f"{action}: the API server at {self.server} did not accept your credentials (401 "
                f"Unauthorized): the token or client certificate of your kubeconfig is missing or "
                f"expired; renew it (e.g. your cloud's get-credentials command) or pick another "
                f"--context/--kubeconfig")
        if status == 403:
            return KubernetesError(
                f"{action}: forbidden (403): {message or 'the account may not do this'}; ask for a "
                f"Role in namespace {ns} that allows it ({RBAC}), or use a --namespace where you "
                f"have one")
        if status == 404:
            if details.get("kind") == "namespaces" or (not details and f'namespaces "{ns}" not found' in message):
                return KubernetesError(f"{action}: namespace {ns!r} does not exist: create it "
                                       f"(`kubectl create namespace {ns}`) or pass --namespace")
            if resource in (m.CLUSTERS, m.JOBS) and not details.get("name"):
                # the group or resource itself is unknown: "404 page not found" or a Status
                # without a name ("the server could not find the requested resource")
                return KubernetesError(
                    f"{action}: this Kubernetes cluster has no {m.GROUP}/{m.VERSION} {kind} resource "
                    f"(the KubeRay CRDs are not installed): {KUBERAY_INSTALL}")
            return KubernetesError(
                f"{action}: there is no {what} in namespace {ns}: `calibrate cluster status "
                f"--namespace {ns}` shows what calibrate made there (`calibrate cluster up` makes a "
                f"cluster)")
        if status == 409:
            other = "--job-name" if resource == m.JOBS else "--name"
            return KubernetesError(
                f"{action}: a {what} already exists in namespace {ns} (409 Conflict): use it as it "
                f"is (`calibrate cluster status`), remove it first (`calibrate cluster down`), or "
                f"choose another {other}")
        if status == 422:
            causes = "; ".join(f"{c.get('field', '?')}: {c.get('message', '')}".strip()
                               for c in details.get("causes") or [])
            return KubernetesError(
                f"{action}: the API server rejected the {kind} as invalid (422): "
                f"{causes or message}; fix the options that set these fields (`--dry-run` prints "
                f"the manifest)")
        if 500 <= status < 600:
            return KubernetesError(
                f"{action}: the API server failed ({status} {error.reason}): {message}; retry, and "
                f"if it persists check the cluster's control plane (`kubectl get --raw /readyz`)")
        return KubernetesError(f"{action}: the API server answered {status} {error.reason}: {message}")

    def unreachable(self, error: BaseException, action: str) -> KubernetesError:
        from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError, ReadTimeoutError

        cause: BaseException = error.reason if isinstance(error, MaxRetryError) and error.reason else error
        # (urllib3 2 makes NewConnectionError, a refused connection, a kind of ConnectTimeoutError)
        timed_out = isinstance(cause, ReadTimeoutError | ConnectTimeoutError | TimeoutError)
        if timed_out and not isinstance(cause, NewConnectionError):
            return KubernetesError(
                f"{action}: no answer from the API server at {self.server} within "
                f"{self.request_timeout:g} s: check that it is reachable from here (VPN, firewall, "
                f"`kubectl cluster-info`), or allow longer with --request-timeout")
        return KubernetesError(
            f"{action}: cannot reach the API server at {self.server} ({type(cause).__name__}: "
            f"{cause}): check the server of your kubeconfig's context (--context) and that the "
            f"cluster is running")

    # -- create, read, delete

    def create(self, manifest: Mapping[str, Any], *, server_dry_run: bool = False) -> dict[str, Any]:
        """Create one object of `calibrate.cluster.manifests` (with `server_dry_run`, have the
        API server validate it without persisting anything)."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        dry = "All" if server_dry_run else None
        if kind == "PersistentVolumeClaim":
            with self._api(f"creating PersistentVolumeClaim {name}", "persistentvolumeclaims", name):
                return _json(self.core.create_namespaced_persistent_volume_claim(
                    self.namespace, dict(manifest), dry_run=dry, _preload_content=False,
                    _request_timeout=self.request_timeout))
        resource = {"RayCluster": m.CLUSTERS, "RayJob": m.JOBS}[kind]
        with self._api(f"creating {kind} {name}", resource, name):
            return dict(self.custom.create_namespaced_custom_object(
                m.GROUP, m.VERSION, self.namespace, resource, dict(manifest),
                dry_run=dry, field_validation="Strict", _request_timeout=self.request_timeout))

    def get(self, resource: str, name: str) -> dict[str, Any]:
        kind = KINDS[resource]
        with self._api(f"reading {kind} {name}", resource, name):
            return dict(self.custom.get_namespaced_custom_object(
                m.GROUP, m.VERSION, self.namespace, resource, name, _request_timeout=self.request_timeout))

    def list_items(self, resource: str, selector: str) -> list[dict[str, Any]]:
        kind = KINDS.get(resource, resource)
        with self._api(f"listing {kind}s", resource):
            if resource in (m.CLUSTERS, m.JOBS):
                answer = self.custom.list_namespaced_custom_object(
                    m.GROUP, m.VERSION, self.namespace, resource, label_selector=selector,
                    _request_timeout=self.request_timeout)
                return list(answer.get("items") or [])
            method = {"pods": self.core.list_namespaced_pod,
                      "persistentvolumeclaims": self.core.list_namespaced_persistent_volume_claim}[resource]
            answer = _json(method(self.namespace, label_selector=selector, _preload_content=False,
                                  _request_timeout=self.request_timeout))
            return list(answer.get("items") or [])

    def delete(self, resource: str, name: str) -> None:
        kind = KINDS[resource]
        with self._api(f"deleting {kind} {name}", resource, name):
            if resource in (m.CLUSTERS, m.JOBS):
                self.custom.delete_namespaced_custom_object(
                    m.GROUP, m.VERSION, self.namespace, resource, name,
                    propagation_policy="Background", _request_timeout=self.request_timeout)
            else:
                self.core.delete_namespaced_persistent_volume_claim(
                    name, self.namespace, _preload_content=False, _request_timeout=self.request_timeout)

    def delete_made(self, cluster: str, *, storage: bool = False) -> tuple[list[str], list[str]]:
        """Delete what `up` and `submit` made for `cluster` (found by its labels, nothing else):
        its RayJobs, the RayCluster (its pods and Secret go with it) and, with `storage`, the
        run-directory claim.  Returns (deleted, kept)."""
        selector = m.selector_of(cluster)
        deleted, kept = [], []
        for resource in (m.JOBS, m.CLUSTERS):
            for item in self.list_items(resource, selector):
                self.delete(resource, item["metadata"]["name"])
                deleted.append(f"{KINDS[resource]} {self.namespace}/{item['metadata']['name']}")
        for item in self.list_items("persistentvolumeclaims", selector):
            name = item["metadata"]["name"]
            if storage:
                self.delete("persistentvolumeclaims", name)
                deleted.append(f"PersistentVolumeClaim {self.namespace}/{name}")
            else:
                kept.append(f"PersistentVolumeClaim {self.namespace}/{name}")
        return deleted, kept

    # -- waiting

    def wait_ready(self, name: str, timeout: float,
                   on_change: Callable[[Readiness], None] | None = None) -> Readiness:
        """Watch the RayCluster until it is ready (`Readiness.ready`); raise on failure or after
        `timeout` seconds, with the pods' reasons.  A watch that ends early is resumed; one the
        server refuses falls back to polling."""
        from kubernetes import watch

        deadline = time.monotonic() + timeout
        last: Readiness | None = None

        def seen(obj: Mapping[str, Any]) -> Readiness:
            nonlocal last
            now = Readiness.of(obj)
            if now != last and on_change:
                on_change(now)
            last = now
            if now.failed:
                raise KubernetesError(f"RayCluster {name} failed: {now.reason or 'see its events'}; "
                                      f"{self.pod_problems(name) or 'kubectl describe raycluster ' + name}")
            return now

        current = seen(self.get(m.CLUSTERS, name))
        polling = False
        while not current.ready:
            left = deadline - time.monotonic()
            if left <= 0:
                problems = self.pod_problems(name)
                raise KubernetesError(
                    f"RayCluster {name} not ready after {timeout:g} s ({current.text()})"
                    + (f": {problems}" if problems else "")
                    + "; `calibrate cluster status` shows its pods, `kubectl describe pods -l "
                      f"{m.RAY_CLUSTER_LABEL}={name}` their events; wait longer with --timeout")
            if polling:
                time.sleep(min(2.0, left))
                current = seen(self.get(m.CLUSTERS, name))
                continue
            stream = watch.Watch().stream(
                self.custom.list_namespaced_custom_object, m.GROUP, m.VERSION, self.namespace, m.CLUSTERS,
                field_selector=f"metadata.name={name}", timeout_seconds=max(1, int(min(left, 60))),
                _request_timeout=min(left, 60) + self.request_timeout)
            try:
                with self._api(f"watching RayCluster {name}", m.CLUSTERS, name):
                    for event in stream:
                        if event["type"] == "DELETED":
                            raise KubernetesError(f"RayCluster {name} was deleted while starting")
                        current = seen(event["raw_object"])
                        if current.ready:
                            break
            except KubernetesError as e:
                if "was deleted" in str(e) or "failed:" in str(e):
                    raise
                polling = True  # a server or proxy that will not watch: ask every 2 s instead
        return current

    def pod_problems(self, cluster: str) -> str:
        """Why the cluster's pods are not running, as their statuses say (best effort)."""
        try:
            pods = self.list_items("pods", f"{m.RAY_CLUSTER_LABEL}={cluster}")
        except KubernetesError:
            return ""
        return "; ".join(f"{p['metadata']['name']}: {why}" for p in pods if (why := pod_problem(p)))

    # -- jobs and logs

    def job_pod(self, job: str, timeout: float, on_change: Callable[[str], None] | None = None) -> str:
        """The submitter pod of RayJob `job` once its container has started (its log is the
        job's log); raises if the job fails first or nothing starts within `timeout`."""
        deadline = time.monotonic() + timeout
        said = ""
        while True:
            state = self.get(m.JOBS, job).get("status") or {}
            pods = self.list_items("pods", f"job-name={job}")
            note = (f"job {state.get('jobDeploymentStatus') or 'New'}"
                    + (f", Ray job {state['jobStatus']}" if state.get("jobStatus") else "")
                    + (f", submitter {pods[0]['status'].get('phase')}" if pods else ""))
            if note != said and on_change:
                on_change(note)
            said = note
            started = [p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")]
            if started:
                return str(started[0]["metadata"]["name"])
            if state.get("jobDeploymentStatus") in JOB_DONE:
                why = state.get("message") or state.get("reason") or "see its events"
                raise KubernetesError(f"RayJob {job} ended ({state.get('jobDeploymentStatus')}) before its "
                                      f"submitter ran: {why}")
            problems = "; ".join(why for p in pods if (why := pod_problem(p)))
            if time.monotonic() > deadline:
                raise KubernetesError(f"RayJob {job}: no submitter running after {timeout:g} s ({note}"
                                      + (f": {problems}" if problems else "")
                                      + f"); `kubectl describe rayjob {job}` shows why")
            time.sleep(2.0)

    def log_lines(self, pod: str, *, container: str | None = None, follow: bool = False) -> Iterator[str]:
        """A pod's log, line by line (until the container ends, with `follow`)."""
        with self._api(f"reading the log of pod {pod}", "pods/log", pod):
            response: Any = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=container, follow=follow or None, _preload_content=False,
                _request_timeout=None if follow else self.request_timeout)
            try:
                pending = b""
                for chunk in response.stream(4096, decode_content=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        yield line.decode(errors="replace")
                if pending:
                    yield pending.decode(errors="replace")
            finally:
                response.release_conn()

    def wait_job_done(self, job: str, timeout: float) -> dict[str, Any]:
        """The RayJob's status once it has ended (or as it is after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.get(m.JOBS, job).get("status") or {}
            if status.get("jobDeploymentStatus") in JOB_DONE or time.monotonic() > deadline:
                return dict(status)
            time.sleep(1.0)


def pod_problem(pod: Mapping[str, Any]) -> str:
    """Why a pod is not running, from its status ('' when nothing is wrong)."""
    status = pod.get("status") or {}
    for c in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip().rstrip(":")
        terminated = (c.get("lastState") or {}).get("terminated") or {}
        if terminated.get("reason") and c.get("restartCount"):
            return f"restarted {c['restartCount']}× (last: {terminated['reason']}, {terminated.get('message', '')})"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', 'Unschedulable')}: {cond.get('message', '')}"
    return ""


__all__ = ["KUBERAY_INSTALL", "Kube", "KubernetesError", "Readiness", "pod_problem"]
