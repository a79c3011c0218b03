"""The cluster image's build, without a container engine: a Debian 12 root filesystem made with
debootstrap from Debian's packages, the repository copied in as `docker build` would (tracked and
untracked files git does not ignore), `./scripts/install` run inside it (chroot) exactly as
cluster/Dockerfile's build stage runs it, then `calibrate --version`, `calibrate schemes` and
`calibrate selftest` inside it; and the container condition the KubeRay workers meet — a
read-only /proc/sys — with the engine failing under it and passing after the workers' postStart
command (`calibrate.cluster.manifests`).  Prints a table of steps, times and sizes.

  sudo nice -n 19 .venv/bin/python experiments/rootfs_selftest.py [--root /var/tmp/calibrate-rootfs] [--keep]

One difference from the Dockerfile, forced by where this runs (only package registries are
reachable): `./scripts/install` would download rustup from its website when no Rust toolchain is
usable; here the host's toolchain (~/.rustup, and ~/.cargo/bin's proxies) is bind-mounted into the
root filesystem read-only, so the install finds `cargo` and skips that step; and where the
network's TLS is re-signed by a local authority (this machine's egress proxy), the host's local
CAs are trusted inside too.  The crates come from crates.io, the Python packages from PyPI, the
Debian packages from Debian's mirror, as in the image.  The Dockerfile's second stage
(debian:12-slim with the runtime packages and the built /opt/calibrate) is not rebuilt here: the
selftest runs in the build stage's root filesystem.

Everything is mounted in a private mount namespace (this script re-executes itself under
`unshare --mount`), so nothing stays mounted on the host whatever happens.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIRROR = "http://deb.debian.org/debian"
INNER = "CALIBRATE_ROOTFS_INNER"
#: what /proc/sys looks like in a container that is not privileged (runc mounts it read-only)
READ_ONLY_SYS = "mount --bind {sys} {sys} && mount -o remount,bind,ro {sys}"


def run(command: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kw)


def size(path: Path) -> str:
    out = subprocess.run(["du", "-sh", "--one-file-system", str(path)], capture_output=True, text=True).stdout
    return out.split()[0] if out else "?"


def gist(output: str) -> str:
    """One line for the table from a command's output: the self-test's measurements, the
    number of schemes available, or the last line with words in it (not a table's border)."""
    lines = [" ".join(line.replace("│", " ").split()) for line in output.splitlines()]
    measured = [line for line in lines if line.startswith(("ping RTT", "cubic throughput", "loss (%)"))]
    if measured:
        return "; ".join(measured)
    available = sum(1 for line in output.splitlines() if line.split("│")[2:3] == [" yes "])
    if available:
        return f"{available} schemes available"
    words = [line for line in lines if any(c.isalnum() for c in line)]
    return words[-1] if words else ""


def copy_context(root: Path) -> int:
    """The build context: tracked and untracked-but-not-ignored files (`COPY . .` with the
    .dockerignore, which leaves out the same build outputs .gitignore does)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    target = root / "opt" / "calibrate"
    count = 0
    for name in filter(None, files):
        source = REPO / name
        if not source.is_file():
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)
        count += 1
    return count


def inner(root: Path) -> list[tuple[str, str, str]]:
    """Runs in the private mount namespace: mounts, install, checks."""
    rows = []

    def step(name: str, command: list[str], **kw) -> subprocess.CompletedProcess:
        started = time.monotonic()
        print("+", " ".join(command), flush=True)
        done = subprocess.run(command, **kw)
        said = gist(done.stdout or "") if kw.get("capture_output") else ""
        rows.append((name, f"{time.monotonic() - started:.0f} s",
                     f"exit {done.returncode}" + (f": {said}" if said else "")))
        return done

    home = Path.home()
    mounts = [(["mount", "-t", "proc", "proc", str(root / "proc")]),
              (["mount", "--rbind", "/dev", str(root / "dev")]),
              (["mount", "-t", "sysfs", "sysfs", str(root / "sys")])]
    for tool in (".rustup", ".cargo/bin"):
        (root / "root" / tool).mkdir(parents=True, exist_ok=True)
        mounts.append(["mount", "--bind", "-o", "ro", str(home / tool), str(root / "root" / tool)])
    for command in mounts:
        run(command)
    shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
    chroot = ["chroot", str(root), "/usr/bin/env", "-i", "HOME=/root", "PATH=/usr/local/sbin:/usr/local/bin:"
              "/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "OMP_NUM_THREADS=1"]
    # A network whose TLS is re-signed by a local authority (this machine's egress proxy): trust
    # what the host trusts, as a Dockerfile behind such a proxy must (`COPY` the CA and run
    # update-ca-certificates); pip and cargo are told to use the system's bundle.
    local_cas = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    if local_cas:
        target = root / "usr" / "local" / "share" / "ca-certificates"
        target.mkdir(parents=True, exist_ok=True)
        for ca in local_cas:
            shutil.copy2(ca, target / ca.name)
        step(f"trust the host's local CAs ({len(local_cas)})", [*chroot, "update-ca-certificates"],
             capture_output=True, text=True)
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        chroot += [f"PIP_CERT={bundle}", f"SSL_CERT_FILE={bundle}", f"REQUESTS_CA_BUNDLE={bundle}",
                   f"CARGO_HTTP_CAINFO={bundle}"]
    step("./scripts/install (apt, venv, pip install -e ., maturin release build)",
         [*chroot, "/opt/calibrate/scripts/install"])
    calibrate = [*chroot, "/opt/calibrate/.venv/bin/calibrate"]
    version = step("calibrate --version", [*calibrate, "--version"], capture_output=True, text=True)
    print(version.stdout)
    schemes = step("calibrate schemes", [*calibrate, "schemes"], capture_output=True, text=True)
    print(schemes.stdout)
    selftest = step("calibrate selftest", [*calibrate, "selftest"], capture_output=True, text=True)
    print(selftest.stdout, selftest.stderr)
    # The container condition: /proc/sys read-only.  The engine refuses (it sets Pantheon's socket
    # buffers in each namespace it creates) ...
    read_only = READ_ONLY_SYS.format(sys=root / "proc" / "sys")
    refused = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                              f"{read_only} && exec {' '.join(calibrate)} selftest"],
                             capture_output=True, text=True)
    errors = [line for line in (refused.stderr or refused.stdout).splitlines() if "error" in line]
    rows.append(("selftest under a read-only /proc/sys (a container's)",
                 "-", f"exit {refused.returncode}: {errors[-1] if errors else ''}"))
    # ... and runs after the workers' postStart command made it writable again.
    from calibrate.cluster.manifests import engine_check

    fixed = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f"{read_only} && chroot {root} /bin/sh -c \"$HOOK\" && "
                            f"exec {' '.join(calibrate)} selftest"],
                           capture_output=True, text=True, env={**os.environ, "HOOK": engine_check()})
    said = gist(fixed.stdout) if fixed.returncode == 0 else (fixed.stderr.strip().splitlines() or [""])[-1]
    rows.append(("postStart hook, then selftest, same condition", "-", f"exit {fixed.returncode}: {said}"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("/var/tmp/calibrate-rootfs"))
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--keep", action="store_true", help="keep the root filesystem afterwards")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (debootstrap, chroot, mounts)", file=sys.stderr)
        return 3
    if os.environ.get(INNER):
        rows = inner(args.root)
        for name, took, outcome in rows:
            print(f"ROW\t{name}\t{took}\t{outcome}", flush=True)
        # as expected: everything passes but the engine under a read-only /proc/sys
        expected = [not o.startswith("exit 0") if "read-only" in n else o.startswith("exit 0") for n, _, o in rows]
        return 0 if all(expected) else 1
    rows = []
    started = time.monotonic()
    if not (args.root / "usr" / "bin" / "apt-get").exists():
        args.root.mkdir(parents=True, exist_ok=True)
        run(["debootstrap", "--variant=minbase", "--include=ca-certificates,curl", "bookworm", str(args.root),
             args.mirror])
        rows.append(("debootstrap bookworm (minbase)", f"{time.monotonic() - started:.0f} s", size(args.root)))
    count = copy_context(args.root)
    rows.append(("copy the build context", "-", f"{count} files"))
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, __file__,
                           "--root", str(args.root)], env={**os.environ, INNER: "1"},
                          stdout=subprocess.PIPE, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("ROW\t"):
            step, took, outcome = line.split("\t", 3)[1:]
            rows.append((step, took, outcome))
        else:
            print(line)
    rows.append(("root filesystem after the install", f"{time.monotonic() - started:.0f} s in all",
                 size(args.root)))
    print("\n| step | time | outcome |\n| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    mounted = [d for d in ("proc", "dev", "sys", "root/.rustup", "root/.cargo/bin") if os.path.ismount(args.root / d)]
    if not args.keep and done.returncode == 0 and not mounted:  # (the mounts lived in the inner namespace)
        shutil.rmtree(args.root)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
