"""The service's HTTP client (`calibrate submit`, `jobs`, `fetch`): what a researcher runs on
their own machine, without root.  Every failure is one `CalibrateError` whose message says what
to do: the server unreachable (`EnvironmentProblem`), or its refusal with its own sentence
(`InputError`), or a job that failed (`RunFailed`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from calibrate.errors import EnvironmentProblem, InputError
from calibrate.service.settings import DEFAULT_SERVER, ENV_SERVER, ENV_TOKEN
from calibrate.targets.archive import extract_archive


@dataclass(frozen=True)
class Event:
    """One server-sent event."""

    name: str
    data: Any
    id: str | None = None


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Server-sent events from the lines of a text/event-stream."""
    name, ident = "message", None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    value: Any = json.loads(text)
                except ValueError:
                    value = text
                yield Event(name, value, ident)
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value_text = line.partition(":")
        value_text = value_text.removeprefix(" ")
        if field == "event":
            name = value_text
        elif field == "data":
            data.append(value_text)
        elif field == "id":
            ident = value_text


@dataclass
class Client:
    """A calibration server at `server` (its base URL), with the API token every request sends."""

    server: str
    token: str | None = None
    timeout_s: float = 60.0

    @classmethod
    def from_options(cls, server: str | None, token: str | None) -> Client:
        url = (server or os.environ.get(ENV_SERVER) or DEFAULT_SERVER).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise InputError(f"--server {url!r} is not an http:// or https:// URL; e.g. {DEFAULT_SERVER}")
        return cls(url, token or os.environ.get(ENV_TOKEN) or None)

    # -- transport

    def _headers(self) -> dict[str, str]:
        """Every request about jobs needs the token: a job is its submitter's (the server's
        --public-reads lets every token read every job)."""
        if not self.token:
            raise InputError(f"need the server's API token: give --token TOKEN or set {ENV_TOKEN} (the server's "
                             f"operator makes one with `calibrate serve token create`)")
        return {"Authorization": f"Bearer {self.token}"}

    def _unreachable(self, error: Exception) -> EnvironmentProblem:
        reason = str(error) or type(error).__name__
        return EnvironmentProblem(f"cannot reach the calibration server at {self.server} ({reason}); check "
                                  f"--server (or {ENV_SERVER}) and that `calibrate serve` runs there")

    def _refused(self, response: httpx.Response) -> InputError:
        try:
            detail = response.json().get("detail")
        except (ValueError, AttributeError):
            detail = None
        if not isinstance(detail, str):
            detail = response.text.strip()[:300] or response.reason_phrase
        return InputError(f"the server refused (HTTP {response.status_code}): {detail}")

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = self._headers()
        try:
            response = httpx.request(method, self.server + path, headers=headers, timeout=self.timeout_s,
                                     **kwargs)
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        if response.status_code >= 400:
            raise self._refused(response)
        return response

    # -- the API

    def submit(self, target: str, options: Mapping[str, Any], *, force: bool = False) -> dict[str, Any]:
        """POST /v1/calibrations: a named target, or a local file (archive or table) uploaded."""
        path = Path(target).expanduser()
        if path.is_dir():
            raise InputError(f"{target} is a directory; pack it first (tar czf result.tar.gz {target}) and "
                             f"submit the archive")
        if path.is_file():
            body = json.dumps({"options": dict(options), "force": force})
            with open(path, "rb") as f:
                return self.request("POST", "/v1/calibrations",
                                    files={"archive": (path.name, f)}, data={"request": body}).json()
        request = {"target": target, "options": dict(options), "force": force}
        return self.request("POST", "/v1/calibrations", json=request).json()

    def submit_study(self, study: str, *, target: str | None = None, calibration: str | None = None,
                     options: Mapping[str, Any], order: str | None = None, force: bool = False) -> dict[str, Any]:
        """POST /v1/studies: a leave-one-out or ablation of a named target or of a calibration's."""
        if target is not None and Path(target).expanduser().exists():
            raise InputError(f"{target} is a local file: a study runs on a target the server has; submit "
                             f"it as a calibration first (calibrate submit {target}), then the study of "
                             f"that calibration's target with --calibration ID")
        request = {"study": study, "options": dict(options), "force": force,
                   **({"target": target} if target is not None else {}),
                   **({"calibration": calibration} if calibration is not None else {}),
                   **({"order": order} if order is not None else {})}
        return self.request("POST", "/v1/studies", json=request).json()

    def job(self, job_id: str, collection: str = "calibrations") -> dict[str, Any]:
        return self.request("GET", f"/v1/{collection}/{job_id}").json()

    def jobs(self, state: str | None = None, collection: str = "calibrations") -> list[dict[str, Any]]:
        params = {"state": state} if state else {}
        return self.request("GET", f"/v1/{collection}", params=params).json()[collection]

    def collection_of(self, job_id: str) -> str:
        """Whether job `job_id` is one of the calibrations or of the studies."""
        for collection in ("calibrations", "studies"):
            try:
                response = httpx.get(f"{self.server}/v1/{collection}/{job_id}", headers=self._headers(),
                                     timeout=self.timeout_s)
            except httpx.TransportError as error:
                raise self._unreachable(error) from None
            if response.status_code == 200:
                return collection
            if response.status_code != 404:
                raise self._refused(response)
        raise InputError(f"no calibration or study {job_id!r} on {self.server}; list them with "
                         f"`calibrate jobs` (or `calibrate jobs --studies`)")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/calibrations/{job_id}").json()

    def events(self, job_id: str) -> Iterator[Event]:
        """The job's events (every finished evaluation, then state changes, then `end`)."""
        url = f"{self.server}/v1/calibrations/{job_id}/events"
        try:
            with httpx.stream("GET", url, headers=self._headers(),
                              timeout=httpx.Timeout(self.timeout_s, read=None)) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._refused(response)
                yield from parse_events(response.iter_lines())
        except httpx.TransportError as error:
            raise self._unreachable(error) from None

    def fetch(self, job_id: str, out: Path, collection: str | None = None) -> Path:
        """Download the export of a finished calibration or study (`collection`, else asked of the
        server) and unpack it (safely) into `out`."""
        out = Path(out)
        if out.exists():
            raise InputError(f"--out {out} exists already; choose another directory or remove it")
        collection = collection or self.collection_of(job_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            archive = staging / "export.zip"
            try:
                with httpx.stream("GET", f"{self.server}/v1/{collection}/{job_id}/export",
                                  headers=self._headers(), timeout=self.timeout_s) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise self._refused(response)
                    with open(archive, "wb") as f:
                        for chunk in response.iter_bytes():
                            f.write(chunk)
            except httpx.TransportError as error:
                raise self._unreachable(error) from None
            unpacked = extract_archive(archive, staging / "unpacked")
            inner = [p for p in unpacked.root.iterdir()]
            source = inner[0] if len(inner) == 1 and inner[0].is_dir() else unpacked.root
            os.replace(source, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return out
