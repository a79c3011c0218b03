"""The HTTP API (FastAPI): `create_app(settings)`.

Every request about jobs needs ``Authorization: Bearer TOKEN`` with a token of `calibrate serve
token create` (401 without one, 403 with one the store does not know); a read (GET) may carry it
as the cookie `TOKEN_COOKIE` instead, which the web page sets (an EventSource, a link or an image
cannot send a header).  Open to all: the server's status, the web page, the API's docs.

Owners: a job belongs to the token that submitted it (`Job.owner`).  Its state, events and
results are its owner's to read, and every valid token's with ``--public-reads``; its log and
its cancel are its owner's alone.  A job a token may not read is answered 404, as if absent (ids
are digests of content: a 403 would tell that someone submitted that content); a job it may
read but not control (``--public-reads``) 403, naming why.  A job from before owners is read-only
to every token.  Every
error is ``{"detail": "one sentence naming the problem and the fix"}``: 400 (not JSON, not a
form), 401, 403, 404 (no such job or file), 409 (not in a state for that: no export before
done, no cancel after done), 413 (a body past --max-upload-bytes), 422 (a request that is well
formed but asks for something wrong: an unknown option, a budget of 0, a target that is no
bundled name or result ID, a scheme the target lacks).  The schema is at /openapi.json, its
pages at /docs.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from swagger_ui_bundle import swagger_ui_path

from calibrate import installed_version
from calibrate.errors import CalibrateError, EnvironmentProblem
from calibrate.runs.options import form_html
from calibrate.service import views
from calibrate.service.intake import (
    CalibrationRequest,
    Intake,
    RunOptions,
    SavedUpload,
    ScoreRequest,
    StudyRequest,
    UploadTooLarge,
    save_upload,
)
from calibrate.service.scheduler import Scheduler
from calibrate.service.settings import ServiceSettings
from calibrate.service.store import (
    CALIBRATION,
    DONE,
    FAILED,
    FINISHED,
    KINDS,
    QUEUED,
    RUNNING,
    SCORE,
    STATES,
    STUDY,
    Caller,
    Job,
    Store,
)

WEB_DIR = Path(__file__).parent / "web"
#: where /docs loads Swagger UI from: the files of the installed swagger-ui-bundle
DOCS_ASSETS = "/docs-assets"
#: what a multipart body may carry beside the upload (the `request` field, the part headers)
FORM_OVERHEAD = 64 * 1024
# How much of a refused body is still read (and dropped) so that its client can read the 413.
DRAIN_BYTES = 64 * 1024**2
DRAIN_S = 5.0
#: how often an event stream looks at the journal, and how long it stays silent at most
EVENT_POLL_S = 0.5
KEEPALIVE_S = 15.0
EXAMPLE = '{"target": "nepal", "options": {"budget": 24, "links": "constant"}}'
#: the longest Last-Event-ID an event stream reads: its ids count evaluations, which are fewer
#: than a job's budget (at most `calibrate.runs.options.MAX_BUDGET` per link kind)
MAX_EVENT_ID_DIGITS = 9
#: the cookie the web page keeps its token in, for reads (module docstring)
TOKEN_COOKIE = "calibrate_token"


# ----------------------------------------------------------------------------------------------
# Errors


def _fields(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _field_of(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel]:
    """The model whose field `loc` names (for the list of fields an unknown one is told)."""
    model = root
    for part in loc[:-1]:
        info = model.model_fields.get(str(part))
        annotation = info.annotation if info is not None else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return model


def validation_detail(errors: list[Any], model: type[BaseModel] | None) -> tuple[int, str]:
    """(status, one sentence) for a request that failed validation: 400 when it is not JSON,
    422 for the first field that is wrong."""
    first = errors[0]
    if first["type"] == "json_invalid":
        why = (first.get("ctx") or {}).get("error") or first["msg"]
        return 400, f"the request body is not valid JSON ({why}); send a JSON object, e.g. {EXAMPLE}"
    loc = tuple(p for p in first["loc"] if p != "body")
    where = ".".join(str(p) for p in loc) or "the request body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "extra_forbidden":
        owner = _field_of(loc, model) if model is not None else None
        what = "option" if owner is RunOptions else "field"
        known = f"; the {what}s are {_fields(owner)}" if owner is not None else ""
        inside = f" (in {'.'.join(str(p) for p in loc[:-1])})" if len(loc) > 1 else ""
        return 422, f"unknown {what} {str(loc[-1])!r}{inside}{known}{more}"
    if first["type"] == "model_type" and not loc:
        return 422, f"the request body must be a JSON object, e.g. {EXAMPLE}"
    message = str(first["msg"]).removeprefix("Value error, ")
    value = first.get("input")
    shown = isinstance(value, (int, float, str, bool)) and first["type"] != "missing"
    got = f" (got {json.dumps(value)})" if shown else ""
    return 422, (f"{where}: " if loc else "") + f"{message}{got}{more}"


def _refuse(status: int, detail: str, headers: dict[str, str] | None = None) -> HTTPException:
    return HTTPException(status_code=status, detail=detail, headers=headers)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Refuses request bodies past `limit` bytes with 413, by their Content-Length before they
    are read, and by counting while they are (a chunked body).

    A server that answers before the body is in and closes makes the client's kernel see a
    reset, and a client that reads only after sending (httpx, requests) never sees the 413's
    message. So the rest of a refused body is read and dropped first, up to DRAIN_BYTES past
    the limit within DRAIN_S; a body larger than that gets the 413 at once (curl, which reads
    while it sends, still shows it)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _message(self) -> str:
        return (f"the request body is larger than this server's limit of {self.limit - FORM_OVERHEAD} "
                f"bytes for an upload (--max-upload-bytes); send a smaller archive (the data archive, "
                f"without raw tunnel logs) or ask the operator to raise the limit")

    async def _send_413(self, send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
        body = json.dumps({"detail": self._message()}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def _drain(self, receive: Any, already: int) -> None:
        """Reads and drops the rest of the body, within DRAIN_BYTES and DRAIN_S."""
        async def rest() -> None:
            dropped = already
            while dropped <= self.limit + DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return
                dropped += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
        try:
            await asyncio.wait_for(rest(), DRAIN_S)
        except TimeoutError:
            pass

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            if int(length) <= self.limit + DRAIN_BYTES:
                await self._drain(receive, 0)
            await self._send_413(send)
            return
        received = 0
        started = False

        async def counted() -> MutableMapping[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge
            return message

        async def watched(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._drain(receive, received)
                await self._send_413(send)


# ----------------------------------------------------------------------------------------------
# The request bodies (parsed by hand: a calibration is JSON or a form, and the token is checked
# before the body is read)


async def _json_body(request: Request, model: type[BaseModel]) -> Any:
    body = await request.body()
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as error:
        status, detail = validation_detail(error.errors(), model)
        raise _refuse(status, detail) from None


async def _form_body(request: Request, settings: ServiceSettings) -> tuple[CalibrationRequest, SavedUpload]:
    try:
        form = await request.form(max_files=1, max_fields=2, max_part_size=FORM_OVERHEAD)
    except _TooLarge:
        raise
    except Exception as error:  # Starlette: MultiPartException, malformed boundaries, ...
        raise _refuse(400, f"the multipart form could not be read ({error}); send the fields 'archive' "
                           f"(the file) and 'request' (the JSON options, target omitted)") from None
    archive = form.get("archive")
    text = form.get("request") or "{}"
    if not isinstance(archive, UploadFile):
        raise _refuse(422, "the multipart form has no file 'archive'; attach the archive or table as "
                           "'archive' (or send JSON with a \"target\" name instead)")
    if not isinstance(text, str):
        raise _refuse(422, "the form field 'request' must be the JSON options as text, not a file")
    try:
        parsed = CalibrationRequest.model_validate_json(text)
    except ValidationError as error:
        status, detail = validation_detail(error.errors(), CalibrationRequest)
        raise _refuse(status, detail.replace("request body", "form field 'request'")) from None
    try:
        upload = await run_in_threadpool(save_upload, archive.file, archive.filename, settings)
    except UploadTooLarge as error:
        raise _refuse(413, str(error)) from None
    finally:
        await archive.close()
    return parsed, upload


def _openapi_body(name: str, form: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}
    if form:
        content["multipart/form-data"] = {"schema": {
            "type": "object", "required": ["archive"],
            "properties": {"archive": {"type": "string", "format": "binary",
                                       "description": "a Pantheon result archive or a summary table"},
                           "request": {"type": "string", "description": f"the {name} as JSON, target omitted"}}}}
    return {"requestBody": {"required": True, "content": content}}


def authorized(request: Request) -> Caller:
    """The caller of a request: its token's, checked against the server's store (module docstring)."""
    header = request.headers.get("authorization")
    hint = "create one on the server with `calibrate serve token create`"
    if not header and request.method == "GET" and request.cookies.get(TOKEN_COOKIE):
        header = f"Bearer {request.cookies[TOKEN_COOKIE]}"  # the web page's reads (never a write)
    if not header:
        raise _refuse(401, f"this request needs an API token: send 'Authorization: Bearer TOKEN' ({hint})",
                      {"WWW-Authenticate": "Bearer"})
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _refuse(401, f"the Authorization header must be 'Bearer TOKEN' ({hint})",
                      {"WWW-Authenticate": "Bearer"})
    caller = request.app.state.store.check_token(token.strip())
    if caller is None:
        raise _refuse(403, "the API token is not valid on this server (unknown or revoked); ask its "
                           "operator for one (`calibrate serve token create` on the server)")
    return caller


#: a handler's caller, checked before the handler runs (`authorized`)
Authorized = Annotated[Caller, Depends(authorized)]


# ----------------------------------------------------------------------------------------------
# The application


def create_app(settings: ServiceSettings, *, store: Store | None = None) -> FastAPI:
    """The service over `settings`' root and store; its scheduler runs while the app does."""
    fresh = not settings.root.exists()
    settings.make_dirs()
    try:
        store = store or Store(settings.store)
        scheduler = Scheduler(settings, store)
        scheduler.claim()
    except BaseException:
        # a refused server leaves no root behind that it made itself
        if fresh:
            shutil.rmtree(settings.root, ignore_errors=True)
        raise
    intake = Intake(settings, store, scheduler.wake)
    runs = views.Runs()
    plots = views.Plots()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            await run_in_threadpool(scheduler.stop)

    app = FastAPI(title="calibrate", version=installed_version() or "unknown", lifespan=lifespan, docs_url=None,
                  description="Calibrate a network emulator to a real Internet path measured with "
                              "Pantheon: submit a target, watch the calibration, get the emulator.")
    app.state.settings, app.state.store, app.state.scheduler = settings, store, scheduler
    app.add_middleware(BodyLimit, limit=settings.max_upload_bytes + FORM_OVERHEAD)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        status, detail = validation_detail(list(error.errors()), None)
        return JSONResponse({"detail": detail}, status_code=status)

    @app.exception_handler(CalibrateError)
    async def refused(request: Request, error: CalibrateError) -> JSONResponse:
        status = 503 if isinstance(error, EnvironmentProblem) else 422
        detail = settings.redact(" ".join(str(error).split()))
        # the server's log: one line per refused request, what its client was told
        print(f"calibrate: refused {request.method} {request.url.path}: {status} {detail[:500]}",
              file=sys.stderr, flush=True)
        return JSONResponse({"detail": detail}, status_code=status)

    def readable(job: Job, caller: Caller) -> bool:
        return job.readable_by(caller.owner, settings.public_reads)

    def job_of(job_id: str, kind: str, caller: Caller) -> Job:
        """The job, if `caller` may read it; else 404, as for no job (module docstring)."""
        job = store.job(job_id)
        if job is not None and not readable(job, caller):
            job = None
        if job is None or job.kind != kind:
            other = "" if job is None else f" (it is a {job.kind}: {views.collection(job.kind)}/{job_id})"
            raise _refuse(404, f"no {kind} {job_id!r} on this server{other}; list them with GET "
                               f"{views.collection(kind)}")
        return job

    def owned(job: Job, caller: Caller, doing: str) -> Job:
        """The job, if `caller` submitted it; else 403 (it can read it: --public-reads)."""
        if not job.owned_by(caller.owner):
            whose = "was made before jobs had owners" if job.owner is None else "belongs to another API token"
            raise _refuse(403, f"{job.kind} {job.id} {whose}; only the token that submitted it can {doing} "
                               f"(submit your own, with your token)")
        return job

    def mine(jobs: list[Job], caller: Caller) -> list[Job]:
        return [job for job in jobs if readable(job, caller)]

    def _state_text(job: Job) -> str:
        if job.state == RUNNING and job.kind == CALIBRATION:
            done = len(runs.records(job))
            budget = job.options["budget"] * len(job.options["links"])
            return f"running ({done}/{budget} evaluations)"
        if job.state == RUNNING and job.kind == STUDY:
            return f"running ({len(runs.records(job))} evaluations so far)"
        return job.state + (f": {job.message}" if job.state not in (QUEUED, DONE) and job.message else "")

    def done_job(job_id: str, caller: Caller, kind: str = CALIBRATION) -> Job:
        job = job_of(job_id, kind, caller)
        if job.state != DONE:
            watch = f"watch {views.collection(kind)}/{job_id}/events" if kind == CALIBRATION else \
                f"poll {views.collection(kind)}/{job_id}"
            raise _refuse(409, f"{kind} {job_id} is {_state_text(job)}; its export exists once it "
                               f"is done ({watch})")
        return job

    def export_of(job: Job) -> FileResponse:
        return FileResponse(views.export_zip(job), media_type="application/zip",
                            filename=f"{job.kind}-{job.id}.zip")

    def file_of(job: Job, name: str) -> FileResponse:
        try:
            path = views.export_file(job, name)
        except CalibrateError as error:
            raise _refuse(400, str(error)) from None
        if path is None:
            raise _refuse(404, f"no file {name!r} in the export of {job.id}; it has "
                               f"{', '.join(views.export_files(job))}")
        return FileResponse(path)

    def log_of(job: Job) -> PlainTextResponse:
        return PlainTextResponse(settings.redact(views.log_tail(job)))

    def summary(job: Job) -> dict[str, Any]:
        """What a client reads of a job: its failure's message without the server's paths."""
        body = views.summary(job, runs)
        if body.get("message"):
            body["message"] = settings.redact(body["message"])
        return body

    def submitted(job: Job, existing: bool) -> JSONResponse:
        body = {"id": job.id, "state": job.state, "existing": existing, "urls": views.urls(job)}
        return JSONResponse(body, status_code=200 if existing else 202,
                            headers={"Location": views.urls(job)["self"]})

    # -- calibrations

    @app.post("/v1/calibrations", status_code=202, tags=["calibrations"],
              openapi_extra=_openapi_body("CalibrationRequest", form=True),
              summary="submit a calibration (JSON, or multipart with an uploaded archive)")
    async def submit_calibration(request: Request, caller: Authorized) -> JSONResponse:
        kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if kind == "multipart/form-data":
            parsed, upload = await _form_body(request, settings)
            job, existing = await run_in_threadpool(intake.calibration, parsed, caller.owner, upload)
        else:  # JSON, whatever the client called it (curl -d says x-www-form-urlencoded)
            parsed = await _json_body(request, CalibrationRequest)
            job, existing = await run_in_threadpool(intake.calibration, parsed, caller.owner)
        return submitted(job, existing)

    @app.get("/v1/calibrations", tags=["calibrations"], summary="list the calibrations")
    def list_calibrations(caller: Authorized,
                          state: Literal["queued", "running", "done", "failed", "cancelled"] | None = None
                          ) -> dict[str, Any]:
        jobs = mine(store.jobs(kind=CALIBRATION, states=None if state is None else [state]), caller)
        return {"calibrations": [summary(job) for job in reversed(jobs)]}

    @app.get("/v1/calibrations/{job_id}", tags=["calibrations"], summary="one calibration")
    def get_calibration(job_id: str, caller: Authorized) -> dict[str, Any]:
        return summary(job_of(job_id, CALIBRATION, caller))

    @app.delete("/v1/calibrations/{job_id}", tags=["calibrations"],
                summary="cancel a calibration")
    def cancel_calibration(job_id: str, caller: Authorized) -> dict[str, Any]:
        return _cancel(owned(job_of(job_id, CALIBRATION, caller), caller, "cancel it"))

    def _cancel(job: Job) -> dict[str, Any]:
        if job.state in FINISHED:  # done, failed, or cancelled already: one answer for all three
            raise _refuse(409, f"{job.kind} {job.id} is {_state_text(job)}; there is nothing to cancel")
        ended = scheduler.cancel(job.id) or job
        if ended.state in (DONE, FAILED):  # it finished while being cancelled
            raise _refuse(409, f"{job.kind} {job.id} is {_state_text(ended)}; there is nothing to cancel")
        return summary(ended)

    @app.get("/v1/calibrations/{job_id}/events", tags=["calibrations"],
             summary="server-sent events: one per finished evaluation, state changes, the end",
             response_class=StreamingResponse)
    async def events(job_id: str, request: Request, caller: Authorized) -> StreamingResponse:
        header = request.headers.get("last-event-id", "").strip()
        if len(header) > MAX_EVENT_ID_DIGITS:
            raise _refuse(400, f"the Last-Event-ID header ({len(header)} characters) is not an event id of "
                               f"this stream (at most {MAX_EVENT_ID_DIGITS} digits); leave it out to start "
                               f"from the first event")
        after = int(header) if header.isdigit() else 0
        job = job_of(job_id, CALIBRATION, caller)

        async def stream() -> AsyncIterator[str]:
            sent, state, quiet = after, None, 0.0
            yield "retry: 2000\n\n"
            while True:
                current = await run_in_threadpool(store.job, job.id) or job
                records = await run_in_threadpool(runs.records, current)  # after the state: a
                # finished job's journal is complete
                for number, data in enumerate(views.event_records(records)[sent:], start=sent + 1):
                    yield f"id: {number}\nevent: evaluation\ndata: {json.dumps(data)}\n\n"
                    sent, quiet = number, 0.0
                if current.state != state:
                    state = current.state
                    body = {"id": current.id, "state": state, "message": settings.redact(current.message or "") or None,
                            "evaluations": len(records)}
                    yield f"event: state\ndata: {json.dumps(body)}\n\n"
                    quiet = 0.0
                if state in FINISHED:
                    yield f"event: end\ndata: {json.dumps({'id': current.id, 'state': state})}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(EVENT_POLL_S)
                quiet += EVENT_POLL_S
                if quiet >= KEEPALIVE_S:
                    yield ": keepalive\n\n"
                    quiet = 0.0

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/v1/calibrations/{job_id}/export", tags=["calibrations"], response_class=FileResponse,
             summary="the export as a zip")
    def get_export(job_id: str, caller: Authorized) -> FileResponse:
        return export_of(done_job(job_id, caller))

    @app.get("/v1/calibrations/{job_id}/files/{name:path}", tags=["calibrations"],
             response_class=FileResponse, summary="one file of the export")
    def get_file(job_id: str, name: str, caller: Authorized) -> FileResponse:
        return file_of(done_job(job_id, caller), name)

    @app.get("/v1/calibrations/{job_id}/convergence.png", tags=["calibrations"],
             response_class=Response, summary="the convergence plot of the journal so far")
    def convergence(job_id: str, caller: Authorized) -> Response:
        job = job_of(job_id, CALIBRATION, caller)
        records = runs.records(job)
        if not records:
            raise _refuse(409, f"calibration {job_id} is {_state_text(job)} and has no finished "
                               f"evaluation yet; the plot exists after the first")
        return Response(plots.convergence(job, records), media_type="image/png",
                        headers={"Cache-Control": "no-cache"})

    @app.get("/v1/calibrations/{job_id}/log", tags=["calibrations"], response_class=PlainTextResponse,
             summary="the end of the job's log (its command's output, the server's paths as <root>): its "
                     "owner's alone")
    def calibration_log(job_id: str, caller: Authorized) -> PlainTextResponse:
        return log_of(owned(job_of(job_id, CALIBRATION, caller), caller, "read its log"))

    # -- scores

    @app.post("/v1/scores", status_code=202, tags=["scores"],
              openapi_extra=_openapi_body("ScoreRequest"),
              summary="score one emulator against a target (calibrate score)")
    async def submit_score(request: Request, caller: Authorized) -> JSONResponse:
        parsed = await _json_body(request, ScoreRequest)
        job, existing = await run_in_threadpool(intake.score, parsed, caller.owner)
        return submitted(job, existing)

    @app.get("/v1/scores", tags=["scores"], summary="list the scores")
    def list_scores(caller: Authorized) -> dict[str, Any]:
        return {"scores": [summary(job) for job in reversed(mine(store.jobs(kind=SCORE), caller))]}

    @app.get("/v1/scores/{job_id}", tags=["scores"], summary="one score: its state, and f once done")
    def get_score(job_id: str, caller: Authorized) -> dict[str, Any]:
        return summary(job_of(job_id, SCORE, caller))

    @app.delete("/v1/scores/{job_id}", tags=["scores"], summary="cancel a score")
    def cancel_score(job_id: str, caller: Authorized) -> dict[str, Any]:
        return _cancel(owned(job_of(job_id, SCORE, caller), caller, "cancel it"))

    # -- studies

    @app.post("/v1/studies", status_code=202, tags=["studies"],
              openapi_extra=_openapi_body("StudyRequest"),
              summary="a leave-one-out (calibrate loo) or an ablation (calibrate ablate) of a target")
    async def submit_study(request: Request, caller: Authorized) -> JSONResponse:
        parsed = await _json_body(request, StudyRequest)
        job, existing = await run_in_threadpool(intake.study, parsed, caller.owner)
        return submitted(job, existing)

    @app.get("/v1/studies", tags=["studies"], summary="list the studies")
    def list_studies(caller: Authorized,
                     state: Literal["queued", "running", "done", "failed", "cancelled"] | None = None
                     ) -> dict[str, Any]:
        jobs = mine(store.jobs(kind=STUDY, states=None if state is None else [state]), caller)
        return {"studies": [summary(job) for job in reversed(jobs)]}

    @app.get("/v1/studies/{job_id}", tags=["studies"],
             summary="one study: its state, evaluations so far, and its table once done")
    def get_study(job_id: str, caller: Authorized) -> dict[str, Any]:
        return summary(job_of(job_id, STUDY, caller))

    @app.delete("/v1/studies/{job_id}", tags=["studies"], summary="cancel a study")
    def cancel_study(job_id: str, caller: Authorized) -> dict[str, Any]:
        return _cancel(owned(job_of(job_id, STUDY, caller), caller, "cancel it"))

    @app.get("/v1/studies/{job_id}/export", tags=["studies"], response_class=FileResponse,
             summary="the study's export as a zip (its table, plot and each fold's or step's emulator)")
    def get_study_export(job_id: str, caller: Authorized) -> FileResponse:
        return export_of(done_job(job_id, caller, STUDY))

    @app.get("/v1/studies/{job_id}/files/{name:path}", tags=["studies"], response_class=FileResponse,
             summary="one file of the study's export")
    def get_study_file(job_id: str, name: str, caller: Authorized) -> FileResponse:
        return file_of(done_job(job_id, caller, STUDY), name)

    @app.get("/v1/studies/{job_id}/log", tags=["studies"], response_class=PlainTextResponse,
             summary="the end of the study's log (its command's output, the server's paths as <root>): its "
                     "owner's alone")
    def study_log(job_id: str, caller: Authorized) -> PlainTextResponse:
        return log_of(owned(job_of(job_id, STUDY, caller), caller, "read its log"))

    # -- the catalogue

    @app.get("/v1/emulators", tags=["catalogue"], summary="the winners of finished calibrations")
    def catalogue(caller: Authorized, target: str | None = None, link: Literal["constant", "poisson"] | None = None,
                  sort: Literal["f", "date"] = "f", order: Literal["asc", "desc"] = "asc",
                  limit: int | None = Query(None, ge=1, le=10000)) -> dict[str, Any]:
        entries = []
        for job in mine(store.jobs(kind=CALIBRATION, states=[DONE]), caller):
            entry = views.catalogue_entry(job, runs)
            if entry is None or (link is not None and entry["link"] != link):
                continue
            if target is not None:
                wanted = target.strip().lower().removeprefix("bundled:")
                if wanted not in (job.target.lower().removeprefix("bundled:"),) and \
                        wanted not in str(entry["description"]).lower():
                    continue
            entries.append(entry)
        entries = views.sort_entries(entries, sort, order)
        return {"emulators": entries[:limit] if limit is not None else entries}

    def catalogued(job_id: str, caller: Caller) -> tuple[Job, Any]:
        job = store.job(job_id)
        if job is not None and not readable(job, caller):
            job = None
        report = runs.report(job) if job is not None and job.kind == CALIBRATION else None
        if job is None or report is None:
            raise _refuse(404, f"no emulator {job_id!r} in the catalogue (only finished calibrations "
                               f"are); list them with GET /v1/emulators")
        return job, report

    @app.get("/v1/emulators/{job_id}/mahimahi.txt", tags=["catalogue"], response_class=PlainTextResponse,
             summary="the winner as a Mahimahi command line")
    def mahimahi(job_id: str, caller: Authorized) -> FileResponse:
        job, _ = catalogued(job_id, caller)
        return FileResponse(views.export_dir(job) / "mahimahi.txt", media_type="text/plain",
                            filename=f"mahimahi-{job.id}.txt")

    @app.get("/v1/emulators/{job_id}/bundle.zip", tags=["catalogue"], response_class=FileResponse,
             summary="the winner's command lines, emulator.json and trace files")
    def bundle(job_id: str, caller: Authorized) -> FileResponse:
        job, report = catalogued(job_id, caller)
        return FileResponse(views.bundle_zip(job, report), media_type="application/zip",
                            filename=f"emulator-{job.id}.zip")

    # -- the server

    @app.get("/v1/status", tags=["server"], summary="the server: version, limits, jobs by state")
    def status() -> dict[str, Any]:
        counts = {state: 0 for state in STATES}
        for job in store.jobs():
            counts[job.state] += 1
        return {"version": installed_version(), "max_running": settings.running_limit,
                "job_slots": settings.job_slots, "ray_address": settings.address,
                "max_upload_bytes": settings.max_upload_bytes, "kinds": list(KINDS), "jobs": counts}

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        """The page, its form's run options made from their declaration (`form_html`)."""
        page = WEB_DIR / "index.html"
        if not page.is_file():
            raise _refuse(404, "this installation has no web page (calibrate/service/web/index.html); "
                               "the API is at /docs")
        text = page.read_text()
        for where in ("main", "more"):
            text = text.replace(f"<!-- run options: {where} -->", form_html(where))
        return HTMLResponse(text)

    app.mount("/static", StaticFiles(directory=WEB_DIR, check_dir=False), name="static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:
        """Swagger UI from the installed swagger-ui-bundle, never a CDN (this origin keeps the web
        page's token), and a Content-Security-Policy that lets the page load nothing else."""
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} API",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png")
        body = bytes(page.body)
        inline = [base64.b64encode(hashlib.sha256(m.encode()).digest()).decode()
                  for m in re.findall(r"<script>(.*?)</script>", body.decode(), flags=re.S)]
        scripts = " ".join(f"'sha256-{h}'" for h in inline)
        policy = (f"default-src 'self'; script-src 'self' {scripts}; style-src 'self' 'unsafe-inline'; "
                  f"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'")
        return Response(body, media_type="text/html", headers={"Content-Security-Policy": policy})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (CalibrationRequest, ScoreRequest, StudyRequest):
                body = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(body.pop("$defs", {}))
                components[model.__name__] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
