"""``devbox gpu profiles`` across several clusters, as a person waits for it.

Starts one testbed and four controllers on it (a namespace each, configured as the
clusters lab-1 to lab-4), then times the whole command, from process start to exit,
``--samples`` times in each of these configurations: 1, 2 and 4 controllers answering,
then 2 and 4 with the last one frozen (SIGSTOP: it accepts connections and never
answers). Before each frozen configuration the silence the CLI remembers is cleared, so
its first sample waits the full timeout and the rest see the remembered silence, as a
person running the command again would. Reports p50, p99 and max per configuration and
the first frozen sample apart.

    PYTHONPATH=testbed:bench .venv/bin/python bench/clusters_bench.py --results
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.rig import Rig

REPO = Path(__file__).resolve().parent.parent
DEVBOX = str(REPO / ".venv" / "bin" / "devbox")
CONTROLLERS = 4


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def environment(home: Path, controllers: list[Controller]) -> dict[str, str]:
    text = "".join(
        f'[clusters.lab-{index}]\nurl = "{c.url}"\ntoken = "{c.token}"\n\n'
        for index, c in enumerate(controllers, start=1)
    )
    path = home / "config.toml"
    path.write_text(text, encoding="utf-8")
    base = {k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")}
    return {**base, "DEVBOX_CONFIG": str(path), "HOME": str(home), "XDG_CACHE_HOME": str(home)}


def timed(env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [DEVBOX, "gpu", "profiles"], capture_output=True, text=True, env=env, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"devbox gpu profiles failed ({done.returncode}): {done.stderr}")
    return seconds, done.stderr.strip()


def report(label: str, seconds: list[float], stderr: str) -> None:
    print(
        f"{label}: n={len(seconds)} p50 {statistics.median(seconds):.3f} s, "
        f"p99 {percentile(seconds, 0.99):.3f} s, max {max(seconds):.3f} s"
        + (f"; stderr: {stderr}" if stderr else "")
    )


def measure(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch, Rig(Path(scratch)) as rig:
        rig.start_testbed(log=lambda message: None)
        controllers = []
        for index in range(1, CONTROLLERS + 1):
            namespace = rig.create_namespace(f"bench-lab-{index}")
            settings = {**example_settings(namespace), "cluster": {"name": f"lab-{index}"}}
            controllers.append(rig.start_controller(settings))
        home = Path(scratch) / "home"
        home.mkdir()
        for count in (1, 2, CONTROLLERS):
            env = environment(home, controllers[:count])
            timed(env)  # the page cache warm, as for any command run twice
            samples = [timed(env) for _ in range(args.samples)]
            report(f"{count} answering", [s for s, _ in samples], samples[-1][1])
        frozen = controllers[-1]
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            for count in (2, CONTROLLERS):
                asked = [*controllers[: count - 1], frozen]
                env = environment(home, asked)
                (home / "devbox" / "silent-clusters.json").unlink(missing_ok=True)
                first, first_stderr = timed(env)
                print(f"{count} with one frozen, first: {first:.3f} s; stderr: {first_stderr}")
                samples = [timed(env) for _ in range(args.samples)]
                report(f"{count} with one frozen, after", [s for s, _ in samples], samples[-1][1])
                everything = [first, *(s for s, _ in samples)]
                report(f"{count} with one frozen, all", everything, "")
        finally:
            os.kill(frozen.pid, signal.SIGCONT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20, help="runs per configuration")
    return record.run("clusters_bench", parser, measure)


if __name__ == "__main__":
    sys.exit(main())
