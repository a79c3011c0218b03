"""EmulatorConfig: validation and its Mahimahi / Pantheon / engine spellings, round trip."""

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.emulator import EmulatorConfig, Queue
from calibrate.errors import InputError

# The calibrated and pathological emulators Pantheon ships (StanfordSNR/observatory's experiments.yml).
OBSERVATORY = [
    ("mm-delay 28 mm-loss uplink 0.0477 mm-link 0.57mbps-poisson.trace 0.57mbps-poisson.trace "
     "--uplink-queue=droptail --uplink-queue-args=packets=14",
     EmulatorConfig(rate_mbps=0.57, delay_ms=28, uplink_loss=0.0477, queue=Queue.droptail(14), link="poisson")),
    ("mm-delay 51 mm-loss uplink 0.0006 mm-link 77.72mbps.trace 77.72mbps.trace "
     "--uplink-queue=droptail --uplink-queue-args=packets=94",
     EmulatorConfig(rate_mbps=77.72, delay_ms=51, uplink_loss=0.0006, queue=Queue.droptail(94))),
    ("mm-delay 10 mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=packets=1 "
     "--downlink-queue=droptail --downlink-queue-args=packets=1",
     EmulatorConfig(rate_mbps=12, delay_ms=10, queue=Queue.droptail(1), downlink_queue=Queue.droptail(1))),
    ("mm-delay 30 mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=bytes=9000",
     EmulatorConfig(rate_mbps=12, delay_ms=30, queue=Queue("droptail", bytes=9000))),
    ("mm-delay 10 mm-link 12mbps.trace 0.12mbps.trace",
     EmulatorConfig(rate_mbps=12, downlink_rate_mbps=0.12, delay_ms=10)),
]


@pytest.mark.parametrize("command, expected", OBSERVATORY)
def test_reads_pantheons_emulators(command, expected):
    assert EmulatorConfig.parse(command) == expected


def test_pantheon_test_py_arguments():
    config = OBSERVATORY[0][1]
    assert config.pantheon_args() == [
        "--uplink-trace", "0.57mbps-poisson-0.trace", "--downlink-trace", "0.57mbps-poisson-0.trace",
        "--prepend-mm-cmds", "mm-delay 28 mm-loss uplink 0.0477",
        "--extra-mm-link-args", "--uplink-queue=droptail --uplink-queue-args=packets=14",
    ]
    assert config.mahimahi_command("up.trace", "down.trace") == (
        "mm-delay 28 mm-loss uplink 0.0477 mm-link up.trace down.trace "
        "--uplink-queue=droptail --uplink-queue-args=packets=14"
    )


def test_engine_arguments_and_generated_traces(tmp_path):
    config = EmulatorConfig(rate_mbps=12, delay_ms=20, queue=Queue.droptail(100), uplink_loss=0.05, loss_seed=9)
    args = config.engine_args(tmp_path)
    assert args == [
        "--uplink-trace", str(tmp_path / "12mbps.trace"), "--downlink-trace", str(tmp_path / "12mbps.trace"),
        "--delay", "20", "--uplink-queue", "droptail", "--uplink-queue-args", "packets=100",
        "--uplink-loss", "0.05", "--seed", "9",
    ]
    assert (tmp_path / "12mbps.trace").read_text().splitlines()[:3] == ["0", "1", "2"]


def test_a_run_keeps_the_traces_and_draws_its_own_losses(tmp_path):
    config = EmulatorConfig(rate_mbps=3, link="poisson", uplink_loss=0.01, trace_seed=7, loss_seed=5)
    runs = [config.for_run(r) for r in (1, 2)]
    assert [r.loss_seed for r in runs] == [7001, 7002]  # trace seed x 1000 + run id
    assert all(r.trace_seed == 7 and r.trace_name("uplink") == "3mbps-poisson-7.trace" for r in runs)
    assert runs[0].engine_args(tmp_path)[-2:] == ["--seed", "7001"]  # the engine's seed is the loss seed
    assert runs[0].trace_paths(tmp_path) == runs[1].trace_paths(tmp_path) == config.trace_paths(tmp_path)
    with pytest.raises(InputError, match="loss_seed must be a non-negative integer"):
        EmulatorConfig(rate_mbps=3, loss_seed=-1)


def test_trace_files_are_used_as_files(tmp_path):
    up = tmp_path / "cell-up.trace"
    up.write_text("1\n2\n")
    config = EmulatorConfig.parse(f"mm-delay 5 mm-link {up} 12mbps.trace")
    assert config.uplink_trace == up and config.rate_mbps is None and config.downlink_rate_mbps == 12
    assert EmulatorConfig.parse("mm-link cell-up.trace 12mbps.trace", trace_dirs=(tmp_path,)).uplink_trace == up


configs = st.builds(
    EmulatorConfig,
    rate_mbps=st.sampled_from([0.12, 0.57, 1.5, 12, 100.42, 250]),
    delay_ms=st.integers(0, 400),
    queue=st.one_of(st.just(Queue()), st.integers(1, 5000).map(Queue.droptail),
                    st.integers(1500, 10**6).map(lambda b: Queue("droptail", bytes=b))),
    uplink_loss=st.sampled_from([0.0, 0.0001, 0.0477, 0.1, 1.0]),
    downlink_loss=st.sampled_from([0.0, 0.004]),
    link=st.sampled_from(["constant", "poisson"]),
    trace_seed=st.integers(0, 2**31),
    loss_seed=st.integers(0, 2**40),
)


@settings(max_examples=200, deadline=None)
@given(configs)
def test_round_trips_through_mahimahi_and_pantheon(config):
    # Mahimahi's loss is unseeded, so the seeds travel beside the command (Poisson trace
    # names carry the trace seed too).
    seeds = {"trace_seed": config.trace_seed, "loss_seed": config.loss_seed}
    assert EmulatorConfig.parse(config.mahimahi_command(), **seeds) == config
    assert EmulatorConfig.parse(shlex.join(config.pantheon_args()), **seeds) == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rate_mbps=0), "at least"),
        (dict(rate_mbps=12, delay_ms=-1), "non-negative integer"),
        (dict(rate_mbps=12, delay_ms=2.5), "non-negative integer"),
        (dict(rate_mbps=12, uplink_loss=1.5), r"probability in \[0, 1\]"),
        (dict(rate_mbps=12, link="bursty"), "constant' or 'poisson"),
        (dict(delay_ms=5), "bottleneck rate"),
    ],
)
def test_invalid_configs_are_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        EmulatorConfig(**kwargs)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty emulator description"),
        ("mm-delay 2.5 mm-link 12mbps.trace 12mbps.trace", "integer number of milliseconds"),
        ("mm-loss sideways 0.1 mm-link 12mbps.trace 12mbps.trace", "uplink or downlink"),
        ("mm-onoff uplink 1 1 mm-link 12mbps.trace 12mbps.trace", "unsupported or incomplete shell"),
        ("mm-delay 20", "needs mm-link"),
        ("mm-link 12mbps.trace", "needs mm-link"),
        ("mm-link nonexistent.trace 12mbps.trace", "not a file and not a rate name"),
        ("mm-link 12mbps.trace 12mbps.trace --uplink-queue=codel", "unknown queue type"),
        ("mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=target=5", "use packets=N"),
        ("mm-link 12mbps.trace 12mbps.trace --meter-all", "unsupported mm-link option"),
        ("--uplink-trace 12mbps.trace --append-mm-cmds 'mm-delay 5'", "inside mm-link"),
        ("--schemes cubic", "unexpected Pantheon argument"),
    ],
)
def test_bad_emulator_descriptions_are_refused(text, message):
    with pytest.raises(InputError, match=message):
        EmulatorConfig.parse(text)
