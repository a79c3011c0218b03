"""Runs: a directory with the settings and the problem (run.json), the target (target.json), an
append-only journal of evaluations, and a result; and the loop that fills it.

- `calibrate.runs.config`: what a run is asked to do (`RunConfig`) and the problem derived from
  it once, at the start (`Problem`: the target's numbers scored, the schemes that run for them,
  the search space, the warm start), and how one candidate's runs are made and scored;
- `calibrate.runs.journal`: the run directory (`RunDir`): its files, their durable writes, the
  journal's records (`Evaluation`), the proposals not yet journaled (`Proposal`), and reading
  all of it back;
- `calibrate.runs.lock`: one writer per run directory (an exclusive lock the kernel releases
  when its holder dies);
- `calibrate.runs.loop`: the calibration loop (`Calibration`): the optimizers ↔ Ray, one
  journal line per finished evaluation, resume from the journal, the result;
- `calibrate.runs.study`, `calibrate.runs.loo`, `calibrate.runs.ablation`: the other kinds of
  run, studies made of many searches over one journal — leave-one-out cross-validation and
  ablations — each a loop over the same directory and record (run.json names its "kind").
"""
