"""The KubeRay manifests `calibrate cluster up` and `submit` generate, validated against KubeRay's
own CRD schemas (v1.7.0, read from the shared folder beside the repository: ../shared/kuberay),
strictly: an unknown field anywhere is an error, as the API server's strict field validation
makes it.  Also what the manifests must say for the engine and for `down`."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from pathlib import Path

import pytest
import yaml

from calibrate.cli import main
from calibrate.cluster import manifests as m
from calibrate.errors import InputError
from calibrate.evaluation import SLOT, SLOTS_PER_CORE

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
KUBERAY = ROOT.parent / "shared" / "kuberay"
NOW = dt.datetime(2026, 11, 23, 21, 0, 0, tzinfo=dt.UTC)


def _strict(schema):
    """The CRD's openAPIV3Schema with unknown fields forbidden wherever the schema lists the
    fields and does not say to keep unknown ones (the API server's structural pruning and
    strict field validation)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _validator(crd_file: str):
    if not (KUBERAY / crd_file).exists():
        pytest.skip(f"KubeRay CRDs not found at {KUBERAY} (the shared folder beside the repository)")
    crd = yaml.safe_load((KUBERAY / crd_file).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == m.VERSION)
    assert crd["spec"]["group"] == m.GROUP and version["served"] and version["storage"]
    return jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))


@pytest.fixture(scope="module")
def clusters():
    return _validator("ray.io_rayclusters.yaml")


@pytest.fixture(scope="module")
def jobs():
    return _validator("ray.io_rayjobs.yaml")


def _errors(validator, manifest):
    return [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]


FULL = m.ClusterOptions(
    name="calib", namespace="emu", image="registry.example.org/calibrate:0.1", image_pull_policy="Always",
    image_pull_secrets=("regcred",), service_account="calibrate", node_selector={"pool": "emulation"},
    tolerations=(m.parse_toleration("dedicated=emulation:NoSchedule"), m.parse_toleration("gpu:NoExecute")),
    worker_cpu="4", worker_memory="8Gi", replicas=2, min_replicas=1, max_replicas=6,
    storage="50Gi", storage_class="fast", access_mode="ReadWriteMany", head_slots=4)

VARIANTS = {
    "defaults": m.ClusterOptions(),
    "everything": FULL,
    "privileged": m.ClusterOptions(privileged=True, worker_cpu="8", slots_per_worker=12),
    "device plugin": m.ClusterOptions(tun_resource="squat.ai/tun", auth=False, runs_claim="shared-runs"),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_the_raycluster_validates_against_the_crd(clusters, name):
    manifest = m.ray_cluster(VARIANTS[name])
    assert _errors(clusters, manifest) == []
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayCluster"


def test_the_validation_is_strict(clusters, jobs):
    """An unknown or mistyped field fails, so passing means something."""
    manifest = m.ray_cluster(FULL)
    manifest["spec"]["workerGroupSpecs"][0]["replica"] = 2
    manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilites"] = {}
    manifest["spec"]["rayVersion"] = 2.6
    errors = _errors(clusters, manifest)
    assert len(errors) == 3, errors
    job = m.ray_job(m.JobOptions(FULL, "nepal", now=NOW))
    job["spec"]["clusterSelector"] = "calib"
    assert _errors(jobs, job)


def test_workers_get_what_the_engine_needs():
    worker = m.ray_cluster(FULL)["spec"]["workerGroupSpecs"][0]
    assert (worker["replicas"], worker["minReplicas"], worker["maxReplicas"]) == (2, 1, 6)
    # slots from the cores (4 per CPU requested), CPUs as requested: the CPU-share rule counts against them
    assert json.loads(json.loads(worker["rayStartParams"]["resources"])) == {SLOT: SLOTS_PER_CORE * 4}
    assert worker["rayStartParams"]["num-cpus"] == "4"
    pod = worker["template"]["spec"]
    container = pod["containers"][0]
    assert set(container["securityContext"]["capabilities"]["add"]) == {"NET_ADMIN", "SYS_ADMIN", "SYS_NICE"}
    assert "privileged" not in container["securityContext"]
    assert {"name": "dev-net-tun", "mountPath": "/dev/net/tun"} in container["volumeMounts"]
    assert {"name": "dev-net-tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}} in pod["volumes"]
    hook = " ".join(container["lifecycle"]["postStart"]["exec"]["command"])
    for key, value in m.ENGINE_SYSCTLS.items():  # the engine's sysctls, checked where it will set them
        assert f"echo '{value}' > /proc/sys/{key.replace('.', '/')}" in hook
    assert "cpu" not in container["resources"]["limits"]  # no CFS quota on a real-time loop
    # ReadWriteMany: the run directories on the workers too; pod options on every pod
    assert {"name": "runs", "mountPath": m.RUNS_MOUNT} in container["volumeMounts"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["serviceAccountName"] == "calibrate"
    assert pod["nodeSelector"] == {"pool": "emulation"}
    assert pod["tolerations"][0] == {"key": "dedicated", "operator": "Equal", "value": "emulation",
                                      "effect": "NoSchedule"}
    assert pod["tolerations"][1] == {"key": "gpu", "operator": "Exists", "effect": "NoExecute"}


def test_privileged_and_device_plugin_variants():
    privileged = m.ray_cluster(VARIANTS["privileged"])["spec"]["workerGroupSpecs"][0]
    container = privileged["template"]["spec"]["containers"][0]
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert json.loads(json.loads(privileged["rayStartParams"]["resources"])) == {SLOT: 12}
    plugin = m.ray_cluster(VARIANTS["device plugin"])
    pod = plugin["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["squat.ai/tun"] == 1
    assert not any(v["name"] == "dev-net-tun" for v in pod["volumes"])
    assert "authOptions" not in plugin["spec"]
    head = plugin["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["volumes"] == [{"name": "runs", "persistentVolumeClaim": {"claimName": "shared-runs"}}]


def test_the_head_runs_drivers_with_the_runs_volume_and_token_auth():
    cluster = m.ray_cluster(m.ClusterOptions(name="calib"))
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0" and "resources" not in head["rayStartParams"]
    container = head["template"]["spec"]["containers"][0]
    assert {"name": "runs", "mountPath": "/runs"} in container["volumeMounts"]
    assert head["template"]["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] == "calib-runs"
    assert cluster["spec"]["authOptions"] == {"mode": "token"}
    assert "enableInTreeAutoscaling" not in cluster["spec"]  # fixed size unless min < max
    # with slots, the head can emulate too, with the same privileges as a worker
    head = m.ray_cluster(FULL)["spec"]["headGroupSpec"]
    assert json.loads(json.loads(head["rayStartParams"]["resources"])) == {SLOT: 4}
    assert "capabilities" in head["template"]["spec"]["containers"][0]["securityContext"]


def test_everything_carries_the_labels_down_selects_by():
    selector = dict(pair.split("=") for pair in m.selector_of("calib").split(","))
    job = m.ray_job(m.JobOptions(FULL, "nepal", now=NOW))
    for manifest in (m.ray_cluster(FULL), m.runs_claim(FULL), job):
        assert selector.items() <= manifest["metadata"]["labels"].items(), manifest["kind"]
    for group in [m.ray_cluster(FULL)["spec"]["headGroupSpec"], *m.ray_cluster(FULL)["spec"]["workerGroupSpecs"]]:
        assert selector.items() <= group["template"]["metadata"]["labels"].items()
    claim = m.runs_claim(FULL)
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "50Gi"}},
                             "storageClassName": "fast"}


def test_the_rayjob_validates_and_runs_calibrate_on_the_cluster(jobs):
    job = m.ray_job(m.JobOptions(FULL, "nepal", ("--budget", "4", "--links", "constant"), now=NOW))
    assert _errors(jobs, job) == []
    assert job["metadata"]["name"] == "calib-nepal-20261123t210000z"
    spec = job["spec"]
    assert spec["clusterSelector"] == {"ray.io/cluster": "calib"}
    assert shlex.split(spec["entrypoint"]) == ["calibrate", "run", "nepal", "--budget", "4", "--links", "constant",
                                               "--out", "/runs/nepal-20261123T210000Z", "--quiet",
                                               "--slots", str(FULL.max_slots)]  # FULL autoscales
    assert job["metadata"]["annotations"]["calibrate/run-directory"] == "/runs/nepal-20261123T210000Z"
    assert spec["submitterPodTemplate"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    resume = m.ray_job(m.JobOptions(FULL, "/runs/nepal-1", resume=True, job_name="calib-resume", now=NOW))
    assert _errors(jobs, resume) == []
    assert shlex.split(resume["spec"]["entrypoint"]) == ["calibrate", "resume", "/runs/nepal-1", "--quiet"]


def test_bad_options_are_refused_in_one_line():
    for options, words in [
        (m.ClusterOptions(name="Calib_1"), "--name"),
        (m.ClusterOptions(worker_cpu="two"), "Kubernetes quantity"),
        (m.ClusterOptions(worker_cpu="500m"), "at least one CPU"),
        (m.ClusterOptions(replicas=5, max_replicas=3), "--max-replicas"),
        (m.ClusterOptions(slots_per_worker=0), "--slots-per-worker"),
    ]:
        with pytest.raises(InputError, match=words):
            m.ray_cluster(options)
    with pytest.raises(InputError, match="EFFECT"):
        m.parse_toleration("dedicated=emulation")
    with pytest.raises(InputError, match="--address"):
        m.ray_job(m.JobOptions(FULL, "nepal", ("--address", "auto")))
    with pytest.raises(InputError, match="under /runs/"):
        m.ray_job(m.JobOptions(FULL, "nepal", ("--out", "runs/x")))


def _dry_run(capsys, verb: str, *argv: str) -> list[dict]:
    assert main(["cluster", verb, "--dry-run", *argv]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_up_dry_run_prints_manifests_that_validate(capsys, clusters):
    docs = _dry_run(capsys, "up", "--name", "calib", "--namespace", "emu", "--image", "r.example.org/calibrate:1",
                    "--image-pull-secret", "regcred", "--workers", "3", "--worker-cpu", "4",
                    "--node-selector", "pool=emulation", "--toleration", "dedicated=emulation:NoSchedule",
                    "--service-account", "calibrate")
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "RayCluster"]
    assert _errors(clusters, docs[1]) == []
    assert docs[1]["spec"]["workerGroupSpecs"][0]["replicas"] == 3


def test_submit_dry_run_prints_a_rayjob_that_validates(capsys, jobs):
    docs = _dry_run(capsys, "submit", "--name", "calib", "--namespace", "emu", "--job-name", "calib-nepal",
                    "nepal", "--budget", "4", "--runtime", "10")
    assert [d["kind"] for d in docs] == ["RayJob"]
    assert _errors(jobs, docs[0]) == []
    assert shlex.split(docs[0]["spec"]["entrypoint"])[:6] == ["calibrate", "run", "nepal", "--budget", "4",
                                                              "--runtime"]


def test_submit_checks_run_options_and_targets_first(capsys, tmp_path):
    assert main(["cluster", "submit", "--dry-run", "nepal", "--budjet", "4"]) == 2
    assert "calibrate run" in capsys.readouterr().err
    assert main(["cluster", "submit", "nepal", "--budget", "4", "--dry-run"]) == 2
    assert "--dry-run: an option of `calibrate cluster submit`" in capsys.readouterr().err
    local_file = tmp_path / "target.csv"
    local_file.write_text("scheme\n")
    assert main(["cluster", "submit", "--dry-run", str(local_file)]) == 2
    assert "kubectl cp" in capsys.readouterr().err


def test_the_other_verbs_dry_run_without_contacting_anything(capsys):
    assert main(["cluster", "down", "--name", "calib", "-n", "emu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "app.kubernetes.io/managed-by=calibrate,app.kubernetes.io/instance=calib" in out
    assert "persistentvolumeclaims" not in out  # kept unless --delete-storage
    assert main(["cluster", "status", "--name", "calib", "-n", "emu", "--dry-run"]) == 0
    assert "GET /apis/ray.io/v1/namespaces/emu/rayclusters/calib" in capsys.readouterr().out
    assert main(["cluster", "logs", "--job", "calib-nepal", "-n", "emu", "--dry-run"]) == 0
    assert "labelSelector=job-name=calib-nepal" in capsys.readouterr().out


def test_submit_reads_the_live_cluster_and_fills_an_autoscaling_one():
    """`submit` runs its submitter like the cluster's pods, and on an autoscaling cluster keeps as
    many runs in flight as the cluster can grow to (its autoscaler adds workers only for tasks
    that wait for a slot)."""
    live = m.ClusterOptions.of_cluster(m.ray_cluster(FULL))
    assert (live.image, live.image_pull_secrets, live.service_account) == (FULL.image, ("regcred",), "calibrate")
    assert (live.replicas, live.min_bound, live.max_bound, live.slots, live.head_slots) == (2, 1, 6, 16, 4)
    entrypoint = shlex.split(m.ray_job(m.JobOptions(live, "nepal", now=NOW))["spec"]["entrypoint"])
    assert entrypoint[-2:] == ["--slots", str(16 * 6 + 4)]
    fixed = m.ClusterOptions.of_cluster(m.ray_cluster(m.ClusterOptions(replicas=3)))
    assert "--slots" not in m.ray_job(m.JobOptions(fixed, "nepal", now=NOW))["spec"]["entrypoint"]
