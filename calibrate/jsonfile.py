"""Reading JSON files that came from elsewhere, with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from calibrate.errors import InputError

# JSON files we read are metadata, perf tables and indexes: a few MB at most.  Anything bigger is
# not what it claims to be, and reading it whole would only waste memory.
MAX_JSON_BYTES = 64 * 1024 * 1024


def read_json(path: Path | str, *, what: str = "JSON file") -> Any:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise InputError(f"{path}: {what} is {size} bytes, more than the {MAX_JSON_BYTES} "
                             "bytes a JSON file of this kind can plausibly be; check the file")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: {what} is not UTF-8 text ({error.reason} at byte "
                         f"{error.start}); check that it is the right file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    return parse_json(text, source=str(path), what=what)


def parse_json(text: str, *, source: str, what: str = "JSON") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{source}:{error.lineno}:{error.colno}: malformed {what}: {error.msg}; "
                         "fix or remove the file") from None
    except RecursionError:  # arrays or objects nested thousands deep: no file of ours is
        raise InputError(f"{source}: malformed {what}: nested too deeply to be one; check that "
                         "it is the right file") from None
    except ValueError as error:  # a number of more digits than Python converts (4300)
        raise InputError(f"{source}: malformed {what}: {type(error).__name__} (a number of "
                         "thousands of digits?); fix or remove the file") from None
