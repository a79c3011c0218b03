"""The `calibrate` command itself (calibrate.cli): its version."""

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from calibrate.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_the_installed_package_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"calibrate {importlib.metadata.version('calibrate')}\n"


def test_the_version_is_written_once_in_the_cargo_workspace():
    cargo = tomllib.loads((ROOT / "emulators" / "Cargo.toml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    for manifest in (ROOT / "emulators" / "Cargo.toml", ROOT / "emulators" / "schemes" / "Cargo.toml"):
        assert tomllib.loads(manifest.read_text())["package"]["version"] == {"workspace": True}
    assert importlib.metadata.version("calibrate") == cargo["workspace"]["package"]["version"]
