"""What a request may ask for, checked before anything runs; and a job made of it.

A request names a target (a bundled name or a Pantheon result ID — never a path on the server)
or uploads one (an archive or a table, saved by the server under a name it chooses), and gives
options from a fixed list (`RunOptions`, `ScoreRequest`).  Only these options become
command-line flags of the job's `calibrate run` / `score` (`run_flags`, `score_flags`), each
written as one ``--name=value`` token, and the server adds the ones that place files
(``--out``, ``--cache-dir``, ``--json-out``), all under its root: no request can make it read or
write anywhere else.

The target is loaded once, here, with the command line's readers (`calibrate.targets`): a bad
name, a result ID that cannot be fetched or an upload that is not a result is refused with the
reader's message, before a job exists.  The job then runs on the target as loaded (its
``input/target.json``), so it never fetches anything and runs exactly the content addressed:

- a named target's content digest is the SHA-256 of the loaded Target's canonical JSON (sorted
  keys), less the two provenance fields that say how it was typed (``source``, ``notes``), so
  ``nepal`` and ``bundled:nepal``, ``P188`` and ``188`` are one content;
- an upload's is the SHA-256 of its bytes;
- a job's digest is the SHA-256 of its owner (the token that submits it: `Caller.owner`), its
  kind, that content digest and the options *normalized*: every default filled in, the link kinds
  as the target resolves them (`links_for`), so ``{}`` and ``{"budget": 30}`` are the same
  request.  A resubmission answers with the job of the same digest, so only ever with one of the
  same token's: another's job is never handed out (nor is its id told: it is another digest).
  Its id is the digest's first 16 hex digits; a forced resubmission (``force``) adds ``-2``, ...
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from calibrate.emulator import EmulatorConfig
from calibrate.errors import CalibrateError, InputError
from calibrate.export import EXPORT_DIR, REPORT
from calibrate.jsonfile import read_json
from calibrate.runs.ablation import GREEDY, parse_order
from calibrate.runs.config import LINK_KINDS, RunConfig
from calibrate.runs.evaluate import host_schemes
from calibrate.runs.options import (
    REQUEST,
    checked_bound,
    checked_links,
    checked_parameter,
    checked_schemes,
    config_of,
    flags_of,
    request_fields,
)
from calibrate.runs.problem import links_for, problem_of, registry_of
from calibrate.service.settings import ServiceSettings
from calibrate.service.store import CALIBRATION, QUEUED, SCORE, STUDY, Job, Store, now
from calibrate.targets.archive import ARCHIVE_SUFFIXES
from calibrate.targets.bundled import bundled_targets, load_bundled
from calibrate.targets.load import BUNDLED_PREFIX, load_path
from calibrate.targets.model import Target
from calibrate.targets.result_id import FetchOptions, looks_like_result_id, parse_result_id, read_result

#: table suffixes an upload may have (archives: `calibrate.targets.archive.ARCHIVE_SUFFIXES`)
TABLE_SUFFIXES = (".csv", ".json", ".txt")
UPLOAD_SUFFIXES = (*ARCHIVE_SUFFIXES, *TABLE_SUFFIXES)
INPUT_DIR = "input"
TARGET_FILE = "target.json"
RUN_DIR = "run"
LOG_FILE = "log.txt"
SCORE_FILE = "score.json"
#: the table a finished study's export holds (`calibrate.study_export`), by its command
STUDY_REPORTS = {"loo": "loo.json", "ablate": "ablation.json"}
_CHUNK = 1024 * 1024


class UploadTooLarge(InputError):
    """An upload past --max-upload-bytes (HTTP 413)."""


# ----------------------------------------------------------------------------------------------
# The requests


def scheme_list(value: str | list[str] | None) -> list[str] | None:
    """Scheme labels as a request gives them ('cubic,vegas' or a list); None for every one."""
    names = _names(value, "schemes")
    return None if names is None else checked_schemes(names)


def _names(value: str | list[str] | None, what: str) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)]
    items = [v for v in items if v]
    if not items:
        raise ValueError(f"{what} is empty: name some, or leave it out")
    return items


class _RunOptionChecks(BaseModel):
    """What a request's options must be beyond their types and bounds (`RunOptions`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("schemes", check_fields=False)
    @classmethod
    def _schemes(cls, value: str | list[str] | None) -> list[str] | None:
        return scheme_list(value)

    @field_validator("links", check_fields=False)
    @classmethod
    def _links(cls, value: str | list[str] | None) -> list[str] | None:
        kinds = _names(value, "links")
        return None if kinds is None else checked_links(kinds)

    @field_validator("fix", "bound", check_fields=False)
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            checked_parameter(name)
        return value

    @field_validator("bound", check_fields=False)
    @classmethod
    def _bounds(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for name, (low, high) in value.items():
            checked_bound(name, low, high)
        return value


#: The options of `calibrate run` a request may give (the rest are the server's), made of their
#: declaration (`calibrate.runs.options`).  Numbers are JSON numbers (strict): "10" and true
#: are no budget.
if TYPE_CHECKING:  # a model made at run time: its fields, typed, are the declaration's
    class RunOptions(_RunOptionChecks):
        def __getattr__(self, name: str) -> Any: ...
else:
    RunOptions = create_model("RunOptions", __base__=_RunOptionChecks, __doc__=_RunOptionChecks.__doc__,
                              **request_fields(REQUEST))


class CalibrationRequest(BaseModel):
    """POST /v1/calibrations: a named target (or, in a multipart request, an `archive` file and
    no target), the options, and whether to run again what was run already."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(default=None, max_length=300, description="a bundled name (nepal, bundled:nepal) "
                               "or a Pantheon result ID (P188, 188 or its URL)")
    options: RunOptions = Field(default_factory=lambda: RunOptions.model_validate({}))
    force: bool = Field(default=False, description="run again even if the same content and options ran")


class _ScoreFields(BaseModel):
    """POST /v1/scores: f of one given emulator on a target (`calibrate score`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    target: str = Field(..., max_length=300, description="a bundled name or a Pantheon result ID")
    emulator: str = Field(..., min_length=1, max_length=2000,
                          description="a Mahimahi command line or Pantheon test.py arguments; traces "
                                      "named by rate (12mbps.trace, 0.57mbps-poisson.trace)")
    force: bool = False

    @field_validator("schemes", check_fields=False)
    @classmethod
    def _schemes(cls, value: str | list[str] | None) -> list[str] | None:
        return scheme_list(value)

    @model_validator(mode="after")
    def _no_files(self) -> _ScoreFields:
        if "/" in self.emulator or "\\" in self.emulator:
            raise ValueError("emulator: the server reads no trace files; name traces by rate "
                             "(12mbps.trace, 0.57mbps-poisson.trace), without a directory")
        return self


#: the score's request: its emulator, and the evaluation's options a request may give
SCORE_OPTIONS = ("schemes", "replicates", "runtime", "seed")
if TYPE_CHECKING:
    class ScoreRequest(_ScoreFields):
        def __getattr__(self, name: str) -> Any: ...
else:
    ScoreRequest = create_model("ScoreRequest", __base__=_ScoreFields, __doc__=_ScoreFields.__doc__,
                                **request_fields(SCORE_OPTIONS))


class StudyRequest(BaseModel):
    """POST /v1/studies: a leave-one-out (`calibrate loo`) or an ablation (`calibrate ablate`) of a
    target: a named one, or the target of a calibration this server has (its id), uploads
    included."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    study: Literal["loo", "ablate"] = Field(..., description="loo: leave-one-out; ablate: the "
                                            "parameters added one by one (the paper's Figure 5)")
    target: str | None = Field(default=None, max_length=300,
                               description="a bundled name or a Pantheon result ID")
    calibration: str | None = Field(default=None, max_length=80,
                                    description="or the id of a calibration on this server: its target")
    options: RunOptions = Field(default_factory=lambda: RunOptions.model_validate({}))
    order: str | None = Field(default=None, max_length=100,
                              description="ablate only: greedy (default), or the parameters in the order "
                                          "they are added, rate first (rate,delay,queue,loss)")
    force: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> StudyRequest:
        if (self.target is None) == (self.calibration is None):
            raise ValueError("give either \"target\" (a bundled name or a Pantheon result ID) or "
                             "\"calibration\" (the id of a calibration on this server), not both")
        if self.study == "loo" and self.order is not None:
            raise ValueError("order: only an ablation adds parameters in an order; leave it out for loo")
        if self.study == "ablate" and self.options.fix:
            raise ValueError("options.fix: an ablation fixes nothing (each step adds a parameter); "
                             "leave it out (`calibrate ablate` has no --fix either)")
        return self


# ----------------------------------------------------------------------------------------------
# Targets


def fetch_options(settings: ServiceSettings, *, offline: bool | None = None) -> FetchOptions:
    """Fetching under the server's root: its cache, its extraction limit, no progress bars."""
    return FetchOptions.from_environment(cache_dir=settings.cache_dir, offline=offline,
                                         max_extract_bytes=settings.max_extract_bytes, progress=False)


def load_named(spec: str, settings: ServiceSettings) -> Target:
    """A bundled target or a Pantheon result ID; never a path on the server."""
    spec = spec.strip()
    bundled = bundled_targets()
    name = spec.removeprefix(BUNDLED_PREFIX)
    if name in bundled:
        return load_bundled(name)
    if spec.startswith(BUNDLED_PREFIX):
        raise InputError(f"no bundled target {name!r}; the bundled ones are {', '.join(sorted(bundled))}")
    if looks_like_result_id(spec):
        result_id, _ = parse_result_id(spec)  # a URL names the ID; the server fetches from its own site
        return read_result(f"P{result_id}", fetch_options(settings))
    raise InputError(f"target {spec!r} is neither a bundled target ({', '.join(sorted(bundled))}) nor a "
                     f"Pantheon result ID (P188, 188 or https://pantheon.stanford.edu/result/188/); to "
                     f"calibrate to your own archive or table, upload it (multipart field 'archive')")


def target_digest(target: Target) -> str:
    """The SHA-256 of the target's content (module docstring)."""
    data = target.to_json()
    data["provenance"] = {k: v for k, v in data["provenance"].items() if k not in ("source", "notes")}
    return _sha256_json(data)


def _sha256_json(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def upload_suffix(filename: str | None) -> str:
    """The suffix the server names an upload with: a known archive or table suffix."""
    name = (filename or "").lower()
    for suffix in sorted(UPLOAD_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    raise InputError(f"upload {filename!r}: expected a Pantheon result archive "
                     f"({', '.join(ARCHIVE_SUFFIXES)}) or a summary table ({', '.join(TABLE_SUFFIXES)})")


@dataclass(frozen=True)
class SavedUpload:
    """An upload as received: in a directory of its own under ROOT/uploads."""

    directory: Path
    path: Path
    sha256: str
    filename: str  # as the client named it (shown, never used as a path)

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def save_upload(source: BinaryIO, filename: str | None, settings: ServiceSettings) -> SavedUpload:
    """Copy an upload under ROOT/uploads with a name of the server's choosing, hashing it and
    refusing it past --max-upload-bytes."""
    suffix = upload_suffix(filename)
    directory = settings.uploads_dir / uuid.uuid4().hex
    directory.mkdir(parents=True)
    path = directory / f"upload{suffix}"
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "wb") as out:
            while chunk := source.read(_CHUNK):
                size += len(chunk)
                if size > settings.max_upload_bytes:
                    raise UploadTooLarge(f"the upload is larger than this server's limit of "
                                         f"{settings.max_upload_bytes} bytes (--max-upload-bytes); "
                                         f"send a smaller archive (the data archive, without raw "
                                         f"tunnel logs)")
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    shown = Path((filename or "").replace("\\", "/")).name[:200]
    return SavedUpload(directory, path, digest.hexdigest(), shown)


def load_upload(upload: SavedUpload, settings: ServiceSettings) -> Target:
    """The uploaded target; a refusal names the upload as the client named it, not the place
    the server keeps it.  An archive is extracted beside the upload, not into the cache: the job
    runs on the target as loaded, so the extraction goes with the upload (`SavedUpload.discard`)
    whether the request is taken or refused."""
    try:
        return load_path(upload.path, fetch=replace(fetch_options(settings, offline=True),
                                                    cache_dir=upload.directory))
    except InputError as error:
        text = str(error).replace(str(upload.path), f"the upload {upload.filename!r}")
        # a member of an archive: by its path in the archive the client sent, not in the
        # extraction under the server's root (ROOT/uploads/UUID/extracted/SHA/exp/...)
        extraction = re.escape(str(upload.directory / "extracted")) + r"/[0-9a-f]+"
        text = re.sub(extraction, lambda _: upload.filename or "the upload", text)
        text = text.replace(str(upload.directory), upload.filename or "the upload")
        raise InputError(text.replace("the download may be incomplete: delete it and fetch it again",
                                      "send the archive again, whole")) from None


# ----------------------------------------------------------------------------------------------
# Options, normalized and checked as `calibrate run` would check them


def _check_problem(target: Target, config: RunConfig) -> None:
    """What `calibrate run` checks before it writes anything: the schemes (in the target, and
    runnable here), the space with the fixed values and bounds."""
    registry = registry_of(config)
    host_schemes(problem_of(target, config, registry), registry)


def normalize_run(options: BaseModel, spec: str, target: Target) -> dict[str, Any]:
    """Every option with its value (defaults filled in, link kinds resolved, parameters in
    order), checked."""
    values = options.model_dump()
    normalized = {name: values[name] for name in REQUEST}
    normalized["links"] = list(links_for(target, tuple(values["links"] or ())))
    normalized["fix"] = {k: values["fix"][k] for k in sorted(values["fix"])}
    normalized["bound"] = {k: list(values["bound"][k]) for k in sorted(values["bound"])}
    _check_problem(target, config_of(spec, normalized))
    return normalized


def normalize_score(request: ScoreRequest, target: Target) -> dict[str, Any]:
    """A score's options, checked; the emulator rewritten as the canonical Mahimahi command."""
    emulator = EmulatorConfig.parse(request.emulator, trace_seed=request.seed)
    if emulator.uplink_trace is not None or emulator.downlink_trace is not None:
        raise InputError("emulator: the server reads no trace files; name traces by rate "
                         "(12mbps.trace, 0.57mbps-poisson.trace)")
    values = request.model_dump()
    normalized = {"emulator": emulator.mahimahi_command(), **{name: values[name] for name in SCORE_OPTIONS}}
    _check_problem(target, config_of(request.target, {name: normalized[name] for name in SCORE_OPTIONS}))
    return normalized


def normalize_study(request: StudyRequest, spec: str, target: Target) -> dict[str, Any]:
    """A study's options, checked as its command checks them: a leave-one-out searches the link
    kinds the target shows (as `calibrate run`), an ablation both unless told (`calibrate ablate`)."""
    options = request.options
    if request.study == "ablate" and not options.links:
        options = options.model_copy(update={"links": list(LINK_KINDS)})
    normalized = {"study": request.study, **normalize_run(options, spec, target)}
    if request.study == "ablate":
        try:
            order = parse_order(request.order or GREEDY)
        except InputError as error:  # the command line's sentence, in the request's words
            raise InputError(str(error).replace("--order", "order", 1)) from None
        normalized["order"] = order if isinstance(order, str) else ",".join(order)
    return normalized


def run_flags(options: Mapping[str, Any]) -> list[str]:
    """The `calibrate run` flags of normalized options, one ``--name=value`` token each."""
    return flags_of({name: options[name] for name in REQUEST})


def score_flags(options: Mapping[str, Any]) -> list[str]:
    """The `calibrate score` flags of a score's normalized options."""
    return [f"--emulator={options['emulator']}", *flags_of({name: options[name] for name in SCORE_OPTIONS})]


def study_flags(options: Mapping[str, Any]) -> list[str]:
    """The `calibrate loo|ablate` flags of a study's normalized options (its command first)."""
    order = [f"--order={options['order']}"] if options.get("order") else []
    return [options["study"], *run_flags(options), *order]


# ----------------------------------------------------------------------------------------------
# Jobs


def made_file(job: Job) -> Path:
    """What the job's command writes last when it succeeds: the export's report, or the score
    (beside its run directory: ROOT/jobs/ID/score.json)."""
    if job.kind == CALIBRATION:
        return Path(job.run_dir) / EXPORT_DIR / REPORT
    if job.kind == STUDY:
        return Path(job.run_dir) / EXPORT_DIR / STUDY_REPORTS[job.options["study"]]
    return Path(job.run_dir).parent / SCORE_FILE


def job_digest(owner: str, kind: str, content: str, options: Mapping[str, Any]) -> str:
    return _sha256_json({"owner": owner, "kind": kind, "content": content, "options": options})


@dataclass
class Intake:
    """Makes jobs of checked requests (content-addressed), in the store and under the root."""

    settings: ServiceSettings
    store: Store
    wake: Callable[[], None] = lambda: None  # tells the scheduler a job is queued

    def job_dir(self, job_id: str) -> Path:
        return self.settings.jobs_dir / job_id

    def calibration(self, request: CalibrationRequest, owner: str, upload: SavedUpload | None = None
                    ) -> tuple[Job, bool]:
        """(the job, whether it existed already) for a checked request of the token `owner`;
        `upload` is the target when the request names none.  Raises CalibrateError (the request
        is refused)."""
        try:
            if upload is not None:
                if request.target is not None:
                    raise InputError("give either a target name or an uploaded archive, not both")
                target, spec, content = load_upload(upload, self.settings), upload.filename, upload.sha256
            else:
                if request.target is None or not request.target.strip():
                    raise InputError("no target: give \"target\" (a bundled name or a Pantheon result ID), "
                                     "or upload an archive or table as the multipart field 'archive'")
                spec = request.target.strip()
                target = load_named(spec, self.settings)
                content = target_digest(target)
            options = normalize_run(request.options, spec, target)
            return self._make(owner, CALIBRATION, spec, target, content, options, request.force, upload)
        finally:
            if upload is not None:
                upload.discard()  # moved into its job by now, or not needed

    def score(self, request: ScoreRequest, owner: str) -> tuple[Job, bool]:
        spec = request.target.strip()
        target = load_named(spec, self.settings)
        options = normalize_score(request, target)
        return self._make(owner, SCORE, spec, target, target_digest(target), options, request.force, None)

    def study(self, request: StudyRequest, owner: str) -> tuple[Job, bool]:
        """A study of a named target, or of the target of one of the token's calibrations (its
        target may be an upload, which is its owner's alone, --public-reads or not)."""
        if request.calibration is not None:
            source = self.store.job(request.calibration.strip())
            if source is None or source.kind != CALIBRATION or not source.owned_by(owner):
                raise InputError(f"calibration: no calibration {request.calibration!r} on this server that this API "
                                 f"token submitted; list yours with GET /v1/calibrations")
            saved = self.job_dir(source.id) / INPUT_DIR / TARGET_FILE
            target = Target.from_json(read_json(saved, what="target"), source=source.target)
            spec, content = source.target, source.target_digest
        else:
            assert request.target is not None  # StudyRequest: one of the two
            spec = request.target.strip()
            target = load_named(spec, self.settings)
            content = target_digest(target)
        options = normalize_study(request, spec, target)
        return self._make(owner, STUDY, spec, target, content, options, request.force, None)

    def _make(self, owner: str, kind: str, spec: str, target: Target, content: str, options: dict[str, Any],
              force: bool, upload: SavedUpload | None) -> tuple[Job, bool]:
        digest = job_digest(owner, kind, content, options)
        if not force:
            existing = self.store.live_job(digest)
            if existing is not None:
                return existing, True
        for attempt in range(1, 1000):
            job_id = digest[:16] if attempt == 1 else f"{digest[:16]}-{attempt}"
            if self.store.job(job_id) is not None or self.job_dir(job_id).exists():
                continue
            job = Job(id=job_id, kind=kind, digest=digest, state=QUEUED, target=spec,
                      target_digest=content, options=options,
                      run_dir=str(self.job_dir(job_id) / RUN_DIR), created=now(), owner=owner)
            if not self._prepare(job, target, upload):
                continue  # another request took this id a moment ago
            if self.store.add_job(job):
                self.wake()
                return job, False
            shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
            if not force:
                existing = self.store.live_job(digest)
                if existing is not None:
                    return existing, True
        raise CalibrateError(f"no free job id for digest {digest[:16]}; remove old jobs of this content")

    def _prepare(self, job: Job, target: Target, upload: SavedUpload | None) -> bool:
        """The job's directory with its input: the target as loaded, and the upload."""
        directory = self.job_dir(job.id)
        try:
            directory.mkdir(parents=True)
        except FileExistsError:
            return False
        inputs = directory / INPUT_DIR
        inputs.mkdir()
        if upload is not None:
            os.replace(upload.path, inputs / upload.path.name)
        (inputs / TARGET_FILE).write_text(target.dumps())
        return True
