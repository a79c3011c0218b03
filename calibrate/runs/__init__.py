"""Runs: a directory with the settings and the problem (run.json), the target (target.json), an
append-only journal of evaluations, and a result; and the loop that fills it.

- `calibrate.runs.config`: what a run is asked to do (`RunConfig`), its link kinds and seeds,
  and the candidate emulator at a point of the space (`emulator_of`);
- `calibrate.runs.problem`: the problem derived from the settings and the target once, at the
  start (`Problem`: the target's numbers scored, the schemes that run for them, the search
  space, the warm start);
- `calibrate.runs.evaluate`: one evaluation of a candidate: its Ray tasks (one per scheme and
  replicate), their score, its per-scheme table;
- `calibrate.runs.journal`: the run directory (`RunDir`): its files, their durable writes, the
  journal's records (`Evaluation`), the proposals not yet journaled (`Proposal`), and reading
  all of it back;
- `calibrate.runs.lock`: one writer per run directory (an exclusive lock the kernel releases
  when its holder dies);
- `calibrate.runs.controller`: the one loop every kind of run shares (`Run`): searches keyed
  by candidate id ↔ Ray, one journal line per finished evaluation, resume from the journal;
- `calibrate.runs.kinds`: the kinds of run, by the "kind" run.json names: a calibration
  (`calibrate.runs.calibration`, one search per link kind), leave-one-out cross-validation
  (`calibrate.runs.loo`) and ablations (`calibrate.runs.ablation`); `calibrate.runs.study`
  holds what the studies share;
- `calibrate.runs.result`: a calibration's result.json, typed; `calibrate.runs.study_result`:
  what every study's result starts with, leave-one-out's result and an ablation's, typed;
  `calibrate.runs.progress`: what a run reports while it runs, and its ETA.
"""
