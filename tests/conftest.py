import os

import pytest

# The tests that need root run the emulator in real time, on a host that can hold a process back for
# milliseconds to seconds: a shared or virtualised machine's vCPU is not always there when its timer
# fires (pings arrive milliseconds late, and a delay-based flow backs off from the spikes), and the
# same test passes on the next run. So a real-time test whose assertion fails runs once more, on
# fresh runs of its own, and fails only if it fails again (pytest's summary counts the reruns). Only
# assertion failures are rerun: an error in the code under test fails at once. A module-scoped
# fixture's runs are not redone (the plugin keeps higher-scoped fixtures across a rerun), so a test
# that reads one makes fresh runs of its own when it is rerun (the `first_try` fixture says which
# try it is); otherwise the rerun would reassert the very runs the host spoiled. The rerun waits a
# little first: the host's stalls come in spells, and a rerun straight after the failure can fall in
# the same one.
REALTIME_RERUNS = 1
REALTIME_RERUN_DELAY_S = 20


def pytest_collection_modifyitems(config, items):
    root = os.geteuid() == 0
    skip = pytest.mark.skip(reason="needs root: creates network namespaces and TUN devices")
    rerun = pytest.mark.flaky(reruns=REALTIME_RERUNS, reruns_delay=REALTIME_RERUN_DELAY_S,
                              only_rerun=["AssertionError"])
    for item in items:
        if "needs_root" in item.keywords:
            item.add_marker(rerun if root else skip)


@pytest.fixture
def first_try(request) -> bool:
    """False when this is a real-time test's rerun: its first try failed, and a module fixture's
    runs, which the rerun keeps, are the ones that failed it."""
    return getattr(request.node, "execution_count", 1) <= 1


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_root: creates network namespaces and TUN devices (run as root)")


def pytest_terminal_summary(terminalreporter):
    """Why each rerun test failed its first try: the plugin lists reruns by name only, and the
    first failure's message (a ping's RTTs, the CPU the hypervisor took) says whether the host or
    the engine was at fault."""
    reruns = terminalreporter.stats.get("rerun", [])
    if not reruns:
        return
    terminalreporter.section("why the rerun tests failed their first try")
    for report in reruns:
        message = report.longreprtext.strip().splitlines()
        failed = [line for line in message if line.startswith("E ")] or message[-1:]
        captured = [line for title, text in report.sections if "stdout" in title for line in text.splitlines()]
        terminalreporter.line(f"{report.nodeid}:")
        for line in [*failed[:12], *captured[-5:]]:
            terminalreporter.line(f"    {line[:300]}")
