import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="needs root: creates network namespaces and TUN devices")
        for item in items:
            if "needs_root" in item.keywords:
                item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_root: creates network namespaces and TUN devices (run as root)")
