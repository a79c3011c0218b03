"""Running calibrations on many machines: Ray clusters that advertise emulator slots.

- `evaluator`: this process as a Ray driver (`Evaluator`): an embedded Ray started or a cluster
  joined, an evaluation's tasks (`calibrate.evaluation`) submitted and their metrics streamed
  back; the one module that imports Ray.
- `auth`: how Ray's authentication token reaches drivers, nodes and workers (and why, left to
  itself, `ray start --head` may refuse drivers with InvalidAuthToken).
- `local`: several Ray nodes (raylets) started on this machine, or this machine's node added to
  a cluster, each advertising its `emulator_slot` capacity (`calibrate cluster local`).
- `manifests`: KubeRay's RayCluster and RayJob (ray.io/v1), and the claim for run directories,
  generated from options (pure functions: values in, dicts out).
- `kube`: those manifests applied, watched and deleted through the official `kubernetes`
  client, every API error turned into one message that names the fix (`calibrate cluster up`,
  `submit`, `status`, `logs`, `down`).

The image the pods run is built by cluster/Dockerfile at the repository root.
"""
