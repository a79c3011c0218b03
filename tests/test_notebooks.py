"""The notebooks (notebooks/*.ipynb), executed with nbclient against small run directories made
here — a calibration, a leave-one-out study and an ablation of a fluid-model target
(`study_fixtures`: the same run directories as the CLI writes, from an evaluator that answers
every run from the model instead of emulating it) — so a notebook that breaks fails the tests.
Each notebook's `parameters` cell is replaced by the run directory, as papermill would, and a
last cell checks that nothing ran on Ray."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("botorch")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from calibrate.export import export  # noqa: E402
from calibrate.runs.ablation import Ablation  # noqa: E402
from calibrate.runs.calibration import Calibration  # noqa: E402
from calibrate.runs.config import RunConfig  # noqa: E402
from calibrate.runs.loo import LeaveOneOut  # noqa: E402
from calibrate.study_export import export_study  # noqa: E402
from calibrate.targets.load import load_target  # noqa: E402
from study_fixtures import FluidEvaluator, write_target  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
#: figures each notebook shows, at least
FIGURES = {"calibration": 3, "loo": 2, "ablation": 2}


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("notebook-runs")
    target_file = write_target(root / "target.csv")
    target = load_target(str(target_file))
    config = RunConfig(target=str(target_file), budget=6, runtime_s=10.0, replicates=2, links=("constant",))
    Calibration.start(root / "calibration", config, target).run(FluidEvaluator())
    export(root / "calibration")
    LeaveOneOut.start(root / "loo", replace(config, budget=6), target).run(FluidEvaluator(8))
    export_study(root / "loo")
    Ablation.start(root / "ablation", replace(config, budget=3, links=("constant", "poisson")), target,
                   "greedy").run(FluidEvaluator(8))
    export_study(root / "ablation")
    return {"calibration": root / "calibration", "loo": root / "loo", "ablation": root / "ablation"}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_executes_against_a_run_directory(name, run_dirs, tmp_path):
    book = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    parameters = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1, "a notebook takes its run directory in one cell tagged parameters"
    parameters[0].source = f"run_dir = {str(run_dirs[name])!r}"
    book.cells.append(nbformat.v4.new_code_cell(
        'import sys\nassert "ray" not in sys.modules, "the notebook ran something on Ray"'))
    nbclient.NotebookClient(book, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= FIGURES[name], f"{name}: {len(images)} figures shown"
    # nothing was written into the run directory but what the CLI writes (the export)
    assert not list(run_dirs[name].glob("*.png"))
