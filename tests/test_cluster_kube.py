"""`calibrate cluster up|submit|status|logs|down` through the official `kubernetes` client against
a local HTTP server standing in for the API server (tests/kube_fake.py; no real one can run
here): the exact requests each verb makes — create, read the status, watch (or poll) until
ready, stream a log, delete by labels — and, for each class of API error, the one message that
names the fix."""

from __future__ import annotations

import re

import pytest

from calibrate.cli import main
from calibrate.cluster import manifests as m
from calibrate.cluster.kube import Kube, KubernetesError, Readiness
from kube_fake import Answer, FakeApiServer, status, watch_events

pytest.importorskip("kubernetes")

NS = "emu"
CLUSTERS = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
JOBS = f"/apis/ray.io/v1/namespaces/{NS}/rayjobs"
PVCS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
PODS = f"/api/v1/namespaces/{NS}/pods"
SELECTOR = "app.kubernetes.io/managed-by=calibrate,app.kubernetes.io/instance=calib"


@pytest.fixture
def api(tmp_path):
    server = FakeApiServer().start()
    server.config = server.kubeconfig(tmp_path)  # type: ignore[attr-defined]
    yield server
    server.stop()


def _cluster(state: str = "", ready_workers: int = 0, desired: int = 2, head: bool = False) -> dict:
    obj = m.ray_cluster(m.ClusterOptions(name="calib", namespace=NS, replicas=desired))
    obj["metadata"]["resourceVersion"] = "7"
    if state or head:
        obj["status"] = {"state": state, "readyWorkerReplicas": ready_workers, "desiredWorkerReplicas": desired,
                         "conditions": [{"type": "HeadPodReady", "status": "True" if head else "False",
                                         "reason": "HeadPodRunningAndReady" if head else "HeadPodNotFound",
                                         "message": "", "lastTransitionTime": "2026-11-23T21:00:00Z"}]}
    return obj


def _cli(api, *argv: str) -> int:
    return main(["cluster", argv[0], "--kubeconfig", str(api.config), "--namespace", NS, "--name", "calib",
                 *argv[1:]])


def test_up_creates_the_claim_and_cluster_then_watches_until_ready(api, capsys):
    api.on("POST", PVCS, lambda r: Answer(201, r.body))
    api.on("POST", CLUSTERS, lambda r: Answer(201, r.body))
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, _cluster()))
    api.on("GET", CLUSTERS, watch_events(("MODIFIED", _cluster("", 0, head=False)),
                                         ("MODIFIED", _cluster("", 1, head=True)),
                                         ("MODIFIED", _cluster("ready", 2, head=True))))
    assert _cli(api, "up", "--image", "r.example.org/calibrate:1", "--workers", "2", "--timeout", "120") == 0
    assert [repr(r) for r in api.requests] == [
        f"POST {PVCS}",
        f"POST {CLUSTERS}?fieldValidation=Strict",
        f"GET {CLUSTERS}/calib",
        f"GET {CLUSTERS}?fieldSelector=metadata.name=calib&timeoutSeconds=60&watch=true",
    ]
    options = m.ClusterOptions(name="calib", namespace=NS, image="r.example.org/calibrate:1", replicas=2)
    assert api.requests[0].body == m.runs_claim(options)
    assert api.requests[1].body == m.ray_cluster(options)
    assert {r.authorization for r in api.requests} == {"Bearer t0ken"}  # the kubeconfig's credentials
    captured = capsys.readouterr()
    assert "workers 1/2 ready" in captured.err  # the progress, one line per change off a terminal
    assert "RayCluster emu/calib ready" in captured.out and "16 emulator slots" in captured.out


def test_a_server_that_will_not_watch_is_polled(api):
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, _cluster("", 0, head=True)))
    api.on("GET", CLUSTERS, status(405, "MethodNotAllowed", "watch is not allowed here"))
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, _cluster("", 1, head=True)))
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, _cluster("ready", 2, head=True)))
    kube = Kube.connect(NS, kubeconfig=str(api.config), request_timeout=5)
    seen: list[Readiness] = []
    assert kube.wait_ready("calib", 30, seen.append).ready
    assert [repr(r).split("?")[0] for r in api.requests] == [f"GET {CLUSTERS}/calib", f"GET {CLUSTERS}",
                                                            f"GET {CLUSTERS}/calib", f"GET {CLUSTERS}/calib"]
    assert [s.ready_workers for s in seen] == [0, 1, 2]


def test_a_cluster_that_does_not_become_ready_says_why(api):
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, _cluster("", 0, head=False)), repeat=True)
    api.on("GET", CLUSTERS, watch_events(), repeat=True)  # the watch ends with nothing new
    pod = {"metadata": {"name": "calib-head-x", "labels": {"ray.io/node-type": "head"}},
           "status": {"phase": "Pending", "containerStatuses": [{"name": "ray-head", "state": {"waiting": {
               "reason": "ImagePullBackOff", "message": "pull access denied"}}}]}}
    api.on("GET", PODS, Answer(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [pod]}))
    kube = Kube.connect(NS, kubeconfig=str(api.config), request_timeout=5)
    with pytest.raises(KubernetesError, match="not ready after 1 s.*ImagePullBackOff: pull access denied"):
        kube.wait_ready("calib", 1)
    assert api.requests[-1].query["labelSelector"] == "ray.io/cluster=calib"


def test_an_existing_claim_is_reused(api, capsys):
    api.on("POST", PVCS, status(409, "AlreadyExists", 'persistentvolumeclaims "calib-runs" already exists',
                                {"name": "calib-runs", "kind": "persistentvolumeclaims"}))
    api.on("POST", CLUSTERS, lambda r: Answer(201, r.body))
    assert _cli(api, "up", "--no-wait") == 0
    assert "reusing PersistentVolumeClaim calib-runs" in capsys.readouterr().err


def test_server_dry_run_creates_nothing(api):
    api.on("POST", PVCS, lambda r: Answer(201, r.body))
    api.on("POST", CLUSTERS, lambda r: Answer(201, r.body))
    assert _cli(api, "up", "--server-dry-run") == 0
    assert [r.query.get("dryRun") for r in api.requests] == ["All", "All"]


def test_status_reads_the_cluster_its_pods_and_its_jobs(api, capsys):
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, _cluster("ready", 2, head=True)))
    head = {"metadata": {"name": "calib-head-x", "labels": {"ray.io/node-type": "head"}},
            "status": {"phase": "Running"}}
    api.on("GET", PODS, Answer(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [head]}))
    api.on("GET", JOBS, Answer(200, {"items": [{"metadata": {"name": "calib-nepal", "annotations": {
        "calibrate/run-directory": "/runs/nepal-1"}}, "status": {"jobDeploymentStatus": "Running",
                                                                   "jobStatus": "RUNNING"}}]}))
    assert _cli(api, "status", "--json") == 0
    assert [repr(r) for r in api.requests] == [f"GET {CLUSTERS}/calib",
                                               f"GET {PODS}?labelSelector=ray.io/cluster=calib",
                                               f"GET {JOBS}?labelSelector={SELECTOR}"]
    out = capsys.readouterr().out
    assert '"ready": true' in out and "/runs/nepal-1" in out and "calib-head-x" in out


def test_submit_creates_a_rayjob_and_streams_its_log(api, capsys):
    live = _cluster("ready", 2, head=True)
    live["spec"]["headGroupSpec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "regcred"}]
    api.on("GET", f"{CLUSTERS}/calib", Answer(200, live))
    api.on("POST", JOBS, lambda r: Answer(201, r.body))
    api.on("GET", f"{JOBS}/calib-nepal", Answer(200, {"status": {"jobDeploymentStatus": "Initializing"}}))
    api.on("GET", PODS, Answer(200, {"items": [{"metadata": {"name": "calib-nepal-abcde"},
                                                "status": {"phase": "Running"}}]}))
    api.on("GET", f"{PODS}/calib-nepal-abcde/log", Answer(200, lines=["calibrate: starting Ray",
                                                                      "constant #1   f =  12.0 %"],
                                                           content_type="text/plain"))
    api.on("GET", f"{JOBS}/calib-nepal", Answer(200, {"status": {"jobDeploymentStatus": "Complete",
                                                                 "jobStatus": "SUCCEEDED"}}))
    assert _cli(api, "submit", "--job-name", "calib-nepal", "nepal", "--budget", "4") == 0
    assert [repr(r) for r in api.requests] == [
        f"GET {CLUSTERS}/calib",
        f"POST {JOBS}?fieldValidation=Strict",
        f"GET {JOBS}/calib-nepal",
        f"GET {PODS}?labelSelector=job-name=calib-nepal",
        f"GET {PODS}/calib-nepal-abcde/log?follow=true",
        f"GET {JOBS}/calib-nepal",
    ]
    job = api.requests[1].body
    assert job["kind"] == "RayJob" and job["spec"]["clusterSelector"] == {"ray.io/cluster": "calib"}
    # the submitter pod gets the live cluster's image and pull secrets
    submitter = job["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["imagePullSecrets"] == [{"name": "regcred"}]
    head = live["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert submitter["containers"][0]["image"] == head["image"]
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["calibrate: starting Ray", "constant #1   f =  12.0 %"]
    assert "RayJob calib-nepal: SUCCEEDED" in captured.err


def test_logs_of_the_head(api, capsys):
    head = {"metadata": {"name": "calib-head-x"}, "status": {"phase": "Running"}}
    api.on("GET", PODS, Answer(200, {"items": [head]}))
    api.on("GET", f"{PODS}/calib-head-x/log", Answer(200, lines=["Ray runtime started."], content_type="text/plain"))
    assert _cli(api, "logs") == 0
    assert [repr(r) for r in api.requests] == [
        f"GET {PODS}?labelSelector=ray.io/cluster=calib,ray.io/node-type=head",
        f"GET {PODS}/calib-head-x/log?container=ray-head"]
    assert capsys.readouterr().out == "Ray runtime started.\n"


def test_down_deletes_what_up_made_by_its_labels_and_keeps_the_runs(api, capsys):
    api.on("GET", JOBS, Answer(200, {"items": [{"metadata": {"name": "calib-nepal"}}]}))
    api.on("DELETE", f"{JOBS}/calib-nepal", Answer(200, {"kind": "Status", "status": "Success"}))
    api.on("GET", CLUSTERS, Answer(200, {"items": [{"metadata": {"name": "calib"}}]}))
    api.on("DELETE", f"{CLUSTERS}/calib", Answer(200, {"kind": "Status", "status": "Success"}))
    api.on("GET", PVCS, Answer(200, {"kind": "PersistentVolumeClaimList", "apiVersion": "v1", "metadata": {},
                                     "items": [{"metadata": {"name": "calib-runs"}, "spec": {}}]}))
    assert _cli(api, "down") == 0
    assert [repr(r) for r in api.requests] == [
        f"GET {JOBS}?labelSelector={SELECTOR}", f"DELETE {JOBS}/calib-nepal?propagationPolicy=Background",
        f"GET {CLUSTERS}?labelSelector={SELECTOR}", f"DELETE {CLUSTERS}/calib?propagationPolicy=Background",
        f"GET {PVCS}?labelSelector={SELECTOR}"]
    out = capsys.readouterr().out
    assert "deleted RayCluster emu/calib" in out and "kept PersistentVolumeClaim emu/calib-runs" in out


def test_down_with_storage_deletes_the_claim_too(api):
    api.on("GET", JOBS, Answer(200, {"items": []}))
    api.on("GET", CLUSTERS, Answer(200, {"items": []}))
    api.on("GET", PVCS, Answer(200, {"items": [{"metadata": {"name": "calib-runs"}}]}))
    api.on("DELETE", f"{PVCS}/calib-runs", Answer(200, {"kind": "Status", "status": "Success"}))
    assert _cli(api, "down", "--delete-storage") == 0
    assert repr(api.requests[-1]) == f"DELETE {PVCS}/calib-runs"


ERRORS = {
    "401": (status(401, "Unauthorized", "Unauthorized"), r"did not accept your credentials \(401"),
    "403": (status(403, "Forbidden", 'rayclusters.ray.io is forbidden: User "ana" cannot create resource '
                   '"rayclusters" in API group "ray.io" in the namespace "emu"',
                   {"group": "ray.io", "kind": "rayclusters"}), r"forbidden \(403\).*ask for a Role in namespace emu"),
    "missing CRD": (Answer(404, "404 page not found\n"), "no ray.io/v1 RayCluster resource.*helm install kuberay"),
    "missing CRD (Status)": (status(404, "NotFound", "the server could not find the requested resource", {}),
                             "KubeRay CRDs are not installed"),
    "missing namespace": (status(404, "NotFound", 'namespaces "emu" not found', {"name": "emu", "kind": "namespaces"}),
                          "namespace 'emu' does not exist: create it"),
    "409": (status(409, "AlreadyExists", 'rayclusters.ray.io "calib" already exists',
                   {"name": "calib", "group": "ray.io", "kind": "rayclusters"}),
            "RayCluster 'calib' already exists in namespace emu.*calibrate cluster down.*another --name"),
    "422": (status(422, "Invalid", 'RayCluster.ray.io "calib" is invalid', {"name": "calib", "causes": [
        {"reason": "FieldValueInvalid", "field": "spec.workerGroupSpecs[0].replicas",
         "message": "Invalid value: -1: must be >= 0"}]}),
            r"invalid \(422\): spec.workerGroupSpecs\[0\].replicas: Invalid value: -1"),
    "500": (status(500, "InternalError", "etcdserver: request timed out"), "the API server failed.*retry"),
    "timeout": (Answer(201, {}, delay=3.0), "no answer from the API server at http://127.0.0.1:.* within 1 s"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_each_api_error_gives_one_message_naming_the_fix(api, capsys, case):
    answer, words = ERRORS[case]
    api.on("POST", CLUSTERS, answer)
    code = _cli(api, "up", "--runs-claim", "existing", "--no-wait", "--request-timeout", "1")
    err = capsys.readouterr().err.strip()
    assert code == 3, err
    assert len(err.splitlines()) == 1 and err.startswith("calibrate: error: creating RayCluster calib: "), err
    assert re.search(words, err), err


def test_an_unreachable_server_and_a_missing_kubeconfig(api, tmp_path, capsys):
    port = api.server.server_address[1]
    api.stop()
    code = _cli(api, "status")
    err = capsys.readouterr().err
    assert code == 3 and f"cannot reach the API server at http://127.0.0.1:{port}" in err
    code = main(["cluster", "status", "--kubeconfig", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 3 and "no usable Kubernetes configuration" in err and "--kubeconfig" in err


def test_a_missing_object_says_how_to_find_or_make_one(api, capsys):
    api.on("GET", f"{CLUSTERS}/calib", status(404, "NotFound", 'rayclusters.ray.io "calib" not found',
                                              {"name": "calib", "group": "ray.io", "kind": "rayclusters"}))
    assert _cli(api, "submit", "nepal") == 3
    err = capsys.readouterr().err
    assert "there is no RayCluster 'calib' in namespace emu" in err and "calibrate cluster up" in err
