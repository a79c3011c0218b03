"""Targets: the real-path measurement a calibration tries to reproduce, and its readers.

- `calibrate.targets.model`: the `Target` and its values (`SchemeResult`, `FlowSummary`,
  `RunResult`, `DroppedRun`, `Workload`, `Provenance`) and the target's own JSON; it imports no
  reader;
- one module per reader, each importing the model (and the readers it builds on), never the
  dispatcher: `datadir` (a Pantheon data directory of any era), `archive` (a result archive: safe
  extraction, then its data directory), `result_id` (P188: the archive index or result page, the
  download cache), `tables` (summary tables: CSV, JSON, compare_two_experiments text), `perf` (a
  pantheon_perf.json on its own), `bundled` (the targets in calibrate/data);
- `calibrate.targets.load`: `load_target`, the only dispatcher from what a user types to a reader.

The per-packet evidence a data directory's logs give (`calibrate.evidence`) is not here: the
target physics reads it too (`calibrate.physics`), and the Target model itself builds on its
`SchemeMeasurement`, so evidence under targets/ would make targets and physics import each other.

Nothing is imported here, so importing the model does not import the readers.
"""
