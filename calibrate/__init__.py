"""Emulator calibration service."""

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str | None:
    """This package's version as installed (written once, in emulators/Cargo.toml; maturin gives
    it to the package); None when the package runs from a source tree that was never installed."""
    try:
        return version("calibrate")
    except PackageNotFoundError:
        return None
