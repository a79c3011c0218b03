"""Emulator calibration service."""
