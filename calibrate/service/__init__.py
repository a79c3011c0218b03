"""The calibration service (`calibrate serve`): an HTTP API over the command line's run shape.

A lab runs one server as root on its emulation host (or a Ray cluster's head); researchers
submit a target and get back a calibrated emulator without a root shell of their own.

- `settings`: what `calibrate serve` was told (root, store URL, Ray address, slots).
- `store`: the job store (SQLAlchemy Core): jobs and hashed API tokens, SQLite in the root by
  default, PostgreSQL by URL.
- `intake`: what a request may ask for (pydantic models), turned into the command-line flags of
  a whitelist; the target loaded once and content-addressed (`Intake`).
- `scheduler`: the job runner: each job is a child process (`python -m calibrate run|resume|
  score`) in its own session, at most `max_running` at once, continued after a restart.
- `views`: what a client reads: a job's summary from its run directory, the journal as events,
  the catalogue of finished calibrations, the zips.
- `app`: the FastAPI application (`create_app`).
- `client`: the HTTP client behind `calibrate submit|jobs|fetch`.

The server's root holds everything it writes::

    ROOT/service.sqlite            the store (unless --store names another)
    ROOT/scheduler.lock            held by the one server running this root's jobs
    ROOT/jobs/<id>/input/          the target as loaded (target.json) and any upload
    ROOT/jobs/<id>/run/            the job's run directory (`calibrate run --out`)
    ROOT/jobs/<id>/log.txt         the child process's stdout and stderr
    ROOT/jobs/<id>/score.json      a score job's result
    ROOT/jobs/<id>/*.zip           the downloads, made once when first asked for
    ROOT/cache/                    result IDs' downloads and archives' extractions
    ROOT/uploads/                  uploads being received (moved into their job, or removed)
"""
