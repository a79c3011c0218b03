"""A local HTTP server standing in for a Kubernetes API server (no real one can run in the test
environment): it records every request (method, path, query, JSON body, Authorization) and
answers from a script of (method, path) rules — a JSON object, a status with a Status body, a
stream of watch events or log lines, or a delay longer than the client's timeout — so that the
`kubernetes` client code of `calibrate cluster` is exercised over real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    authorization: str | None

    def __repr__(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in sorted(self.query.items()))
        return f"{self.method} {self.path}" + (f"?{query}" if query else "")


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # dict/list -> JSON; str -> text
    lines: list[str] | None = None  # streamed one by one (watch events, log lines)
    delay: float = 0.0
    content_type: str = "application/json"


def status(code: int, reason: str, message: str, details: dict | None = None) -> Answer:
    """A Kubernetes Status object, as the API server sends with an error."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return Answer(code, body)


def watch_events(*events: tuple[str, dict]) -> Answer:
    return Answer(200, lines=[json.dumps({"type": kind, "object": obj}) for kind, obj in events])


@dataclass
class FakeApiServer:
    """Rules are tried in order; a rule answers once unless `repeat`.  Unmatched requests get
    a 599 whose body names them (the test then fails on the request list)."""

    rules: list[tuple[str, str, Callable[[Request], Answer] | Answer, bool]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def on(self, method: str, path: str, answer: Answer | Callable[[Request], Answer], *, repeat: bool = False) -> None:
        self.rules.append((method, path, answer, repeat))

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeApiServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = Request(self.command, parts.path,
                                  {k: v[-1] for k, v in parse_qs(parts.query).items()},
                                  json.loads(raw) if raw else None, self.headers.get("Authorization"))
                fake.requests.append(request)
                answer = fake.answer(request)
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    if answer.lines is not None:
                        self.send_header("Content-Type", answer.content_type)
                        self.end_headers()
                        for line in answer.lines:
                            self.wfile.write(line.encode() + b"\n")
                            self.wfile.flush()
                        return
                    if isinstance(answer.body, str):
                        data, kind = answer.body.encode(), "text/plain"
                    else:
                        data, kind = json.dumps(answer.body if answer.body is not None else {}).encode(), \
                            answer.content_type
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def answer(self, request: Request) -> Answer:
        for i, (method, path, answer, repeat) in enumerate(self.rules):
            if method == request.method and path == request.path:
                if not repeat:
                    del self.rules[i]
                return answer(request) if callable(answer) else answer
        return Answer(599, {"kind": "Status", "message": f"no rule for {request!r}"})

    def kubeconfig(self, directory: Path, token: str = "t0ken", namespace: str = "emu") -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}],
        }))
        return path
