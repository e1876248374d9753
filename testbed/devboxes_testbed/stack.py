"""Everything `make up` runs: the testbed cluster and the services on top of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .cluster import Testbed


@dataclass
class Stack:
    testbed: Testbed
    state_dir: Path

    def start(self) -> None:
        self.testbed.start()

    def stop(self) -> None:
        self.testbed.stop()

    def env(self) -> dict[str, str]:
        return self.testbed.env()

    def summary(self, env_file: Path) -> str:
        lines = [
            "",
            "Devboxes testbed is running:",
            f"  Kubernetes API   {self.testbed.server}",
            f"  environment      source {env_file}",
            "  Ctrl-C stops everything.",
        ]
        return "\n".join(lines)
