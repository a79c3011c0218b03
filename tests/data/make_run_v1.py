"""How tests/data/run-v1 was made: a run directory of format 1, written by the code at commit
946d45d (before calibrate.runs), without emulation — the stand-in evaluator of
tests/test_calibration_loop.py answers every run.  It is kept as that code wrote it; this
script runs only against that commit's sources, not against the current ones:

  SRC=$(mktemp -d) && git archive 946d45d calibrate tests | tar -x -C $SRC
  cp tests/data/make_run_v1.py $SRC && cd $SRC
  PYTHONPATH=$SRC:$SRC/tests python make_run_v1.py OUT

OUT/full/            the whole run (BUDGET per link kind), its result.json and its export
OUT/run-v1/          the same run interrupted after KEEP journal lines (no result.json, no
                     export): copied to tests/data/run-v1/
OUT/export-v1.json   that commit's export (emulator.json) of OUT/run-v1 as it is
OUT/hidden.json      the stand-in evaluator's hidden emulator

tests/data/run-v1.expected.json gathers what that commit answered: the full run's journal
(link, candidate, phase, params, f per line), its result, and export-v1.json.
"""
import json
import shutil
import sys
from pathlib import Path

from calibrate.calibration import JOURNAL, RESULT, Calibration, RunConfig
from calibrate.export import export
from calibrate.target import load_target
from test_calibration_loop import AnalyticEvaluator, hidden_of


class LinkEvaluator(AnalyticEvaluator):
    """The loop test's stand-in, with Poisson deliveries 8 % slower and 5 % later, so the two
    link kinds' searches differ."""

    def submit(self, task):
        from dataclasses import replace
        ref = super().submit(task)
        if task.emulator.link == "poisson":
            m = self.done[ref]
            self.done[ref] = replace(m, flows={k: (t * 0.92, d * 1.05, loss) for k, (t, d, loss) in m.flows.items()})
        return ref


BUDGET, KEEP = 7, 9
out = Path(sys.argv[1])
shutil.rmtree(out, ignore_errors=True)
config = RunConfig(target="nepal", budget=BUDGET, runtime_s=10, replicates=2, seed=5)
calibration = Calibration.start(out / "full", config, load_target("nepal"))
hidden = hidden_of(calibration)
json.dump(hidden, open(out / "hidden.json", "w"))
calibration.run(LinkEvaluator(calibration, hidden))
export(out / "full")
shutil.copytree(out / "full", out / "run-v1", ignore=shutil.ignore_patterns("export", RESULT))
lines = (out / "full" / JOURNAL).read_text().splitlines(keepends=True)
(out / "run-v1" / JOURNAL).write_text("".join(lines[:KEEP]))
tmp = out / "tmp-export"
export(out / "run-v1", tmp)
shutil.copy(tmp / "emulator.json", out / "export-v1.json")
shutil.rmtree(tmp)
print("ok", len(lines))
