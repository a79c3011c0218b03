"""The Pantheon paper's two studies of a calibration, for one target, beside the paper's numbers.

1. Leave-one-out (`calibrate loo`): each scheme predicted by an emulator calibrated on the others.
   The paper (§5): the held-out scheme within about 20 %.
2. Ablation (`calibrate ablate`): nested emulators, the parameters added one by one in the order
   of their contribution, then constant vs Poisson deliveries.  The paper (Figure 5): China
   wired, rate only 211.8 % → + delay 189.7 % → + buffer 32.3 % → + loss 17.7 %; Colombia
   cellular, constant 23.7 % → Poisson 13.0 %.

Each study is an ordinary run directory under --out (loo/, ablation/): the script runs it with
the CLI's own code (start, or continue one that was interrupted: nothing is run twice), exports
it, and prints the two paper-style tables.  `--report` only reads existing run directories.

Run as root on an otherwise idle machine (emulation is real-time).  The budget is what decides
the wall time: an evaluation runs every scheme `--replicates` times for `--runtime` s (+ 3 s of
set-up and ~1.5 s of teardown) on Ray's emulator slots (8 on 2 cores); with the bundled Nepal
target (6 schemes that run here) at 30 s × 2 replicates that is about 52 s an evaluation, so

    .venv/bin/python experiments/studies.py nepal --loo-budget 20 --ablation-budget 8 --runtime 30 --replicates 2

takes about 40–45 min for the leave-one-out (20 evaluations per link kind, both kinds) and
about an hour for the greedy ablation (8 searches: 1 + 3 + 2 + 1 constant, 1 Poisson, ≤ 8
evaluations each, fewer where a search's model rules out improvement).

    .venv/bin/python experiments/studies.py nepal --report --out experiments/out/studies-nepal
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from calibrate.cli import main as calibrate
from calibrate.study_export import PAPER_ABLATION, PAPER_LOO_PCT, study_result

OUT = Path(__file__).resolve().parent / "out"


def _run(kind: str, run_dir: Path, target: str, budget: int, args: argparse.Namespace) -> None:
    """Start the study, or continue it when its run directory exists (an interrupted one)."""
    ray = ["--quiet"] + (["--address", args.address] if args.address else [])
    if (run_dir / "run.json").exists():
        print(f"== continuing {run_dir}", flush=True)
        code = calibrate(["resume", str(run_dir), *ray])
    else:
        common = [target, "--budget", str(budget), "--runtime", str(args.runtime), "--replicates",
                  str(args.replicates), "--seed", str(args.seed), "--out", str(run_dir), *ray]
        if args.schemes:
            common += ["--schemes", args.schemes]
        extra = ["--order", args.order] if kind == "ablate" else (["--links", args.links] if args.links else [])
        print(f"== calibrate {kind} {' '.join(common + extra)}", flush=True)
        code = calibrate([kind, *common, *extra])
    if code != 0:
        sys.exit(code)


def loo_table(run_dir: Path) -> None:
    result = study_result(run_dir)
    print(f"\nLeave-one-out, {result['target']}: {result['evaluations']} shared evaluations, "
          f"{result['replicates']} × {result['runtime_s']:g} s, wall {result['wall_s'] / 60:.0f} min")
    print(f"{'held-out scheme':<28} {'held-out f %':>13} {'tput err %':>11} {'p95 err %':>10} "
          f"{'in-sample f %':>14}  emulator (fitted without it)")
    for fold in result["folds"]:
        held, ins = fold.get("held_out"), fold.get("in_sample")
        if not held:
            print(f"{fold['fold']:<28} {'–':>13}")
            continue
        shown = "failed" if fold.get("failed") else f"{held['f']:.1f}"
        print(f"{fold['fold']:<28} {shown:>13} {held['errors_pct']['tput']:>11.1f} "
              f"{held['errors_pct']['delay']:>10.1f} {ins['f']:>14.1f}  {fold['emulator']}")
    h, i = result["held_out"], result["in_sample"]

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{v:.1f}"

    print(f"{'mean / median (' + str(h['n']) + ' folds)':<28} {pct(h['mean']) + ' / ' + pct(h['median']):>13} "
          f"{'':>11} {'':>10} {pct(i['mean']) + ' / ' + pct(i['median']):>14}")
    print(f"{'Pantheon paper':<28} {'≈ ' + format(PAPER_LOO_PCT, '.0f'):>13}   (held-out scheme within about "
          f"{PAPER_LOO_PCT:.0f} %)")
    share = result["sharing"]
    print(f"shared evaluations: {share['scheme_runs']} scheme runs instead of "
          f"{share['independent_scheme_runs']} for independent folds ({share['saved']} saved)")


def ablation_table(run_dir: Path) -> None:
    result = study_result(run_dir)
    order = result["order"] if isinstance(result["order"], str) else ",".join(result["order"])
    print(f"\nAblation, {result['target']} (order {order}): {result['evaluations']} evaluations, "
          f"{result['replicates']} × {result['runtime_s']:g} s, wall {result['wall_s'] / 60:.0f} min; "
          f"step 0: the rate, {result['defaults_text']}")
    china, colombia = (numbers for numbers in PAPER_ABLATION.values())
    steps = [s for s in result["steps"] if s.get("f") is not None]
    nested = [s for s in steps if s["link"] == result["links"][0]]
    print(f"{'step':<5} {'model':<22} {'f % here':>10} {'noise':>7}   {'paper, China wired':<26} "
          f"{'paper, Colombia cellular':<28} emulator")
    for s in steps:
        mark = " ▲" if s.get("rise") else ""
        noise = "–" if s.get("noise") is None else f"{s['noise']:.1f}"
        i = nested.index(s) if s in nested else None
        ch = f"{china[i][0]} {china[i][1]:.1f}" if i is not None and i < len(china) else ""
        co = ""
        if s is nested[-1] and len(steps) > len(nested):
            co = f"{colombia[0][0]} {colombia[0][1]:.1f}"
        elif s not in nested:
            co = f"{colombia[1][0]} {colombia[1][1]:.1f}"
        print(f"{s['step']:<5} {s['label']:<22} {s['f']:>8.1f}{mark:<2} {noise:>7}   {ch:<26} {co:<28} "
              f"{s['emulator']}")
    print("▲: f rose beyond the two steps' measured noise; the paper's greedy order on China wired "
          "was delay, buffer, loss")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="TARGET as `calibrate run` takes it (e.g. nepal)")
    parser.add_argument("--out", type=Path, help="where the two run directories go (default "
                        "experiments/out/studies-<target>)")
    parser.add_argument("--loo-budget", type=int, default=20, help="evaluations per link kind, shared by the folds")
    parser.add_argument("--ablation-budget", type=int, default=8, help="evaluations per search of each step")
    parser.add_argument("--runtime", type=float, default=30.0)
    parser.add_argument("--replicates", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schemes", help="target schemes to score (default: every one this host runs)")
    parser.add_argument("--links", help="the leave-one-out's link kinds (default: as `calibrate run`)")
    parser.add_argument("--order", default="greedy", help="the ablation's order (default: greedy)")
    parser.add_argument("--only", choices=("loo", "ablation"), help="run one study only")
    parser.add_argument("--address", help="a Ray cluster to run on (default: an embedded Ray)")
    parser.add_argument("--report", action="store_true", help="only print the tables of existing runs")
    args = parser.parse_args()
    out = args.out or OUT / f"studies-{Path(args.target.rstrip('/')).name}"
    started = time.monotonic()
    studies = [("loo", out / "loo", args.loo_budget, loo_table),
               ("ablate", out / "ablation", args.ablation_budget, ablation_table)]
    for kind, run_dir, budget, table in studies:
        if args.only and not kind.startswith(args.only[:3]):
            continue
        if not args.report:
            _run(kind, run_dir, args.target, budget, args)
        if (run_dir / "run.json").exists():
            table(run_dir)
    if not args.report:
        print(f"\ntotal wall time {(time.monotonic() - started) / 60:.0f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
