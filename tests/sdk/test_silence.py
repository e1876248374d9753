"""Clusters that did not answer, remembered for a minute across commands."""

from __future__ import annotations

from pathlib import Path

from devboxes_sdk._silence import REMEMBERED_SECONDS, SHORT_SECONDS, Silences, silence_path

URL = "https://lab-b.example.com"


def test_a_silent_cluster_gets_the_short_time_for_a_minute_then_the_full_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "silent.json"
    silences = Silences(path)
    assert silences.budget(URL, 3.0, 1000.0) == 3.0
    silences.silent(URL, 1000.0)
    silences.save(1000.0)
    later = Silences(path)
    assert later.since(URL, 1010.0) == 1000.0
    assert later.budget(URL, 3.0, 1010.0) == SHORT_SECONDS
    assert later.budget(URL, 0.2, 1010.0) == 0.2
    assert later.budget(URL, 3.0, 1000.0 + REMEMBERED_SECONDS) == 3.0
    assert later.budget("https://lab-a.example.com", 3.0, 1010.0) == 3.0


def test_an_answer_forgets_the_silence(tmp_path: Path) -> None:
    path = tmp_path / "silent.json"
    silences = Silences(path)
    silences.silent(URL, 1000.0)
    silences.save(1000.0)
    silences.answered(URL)
    silences.save(1001.0)
    assert Silences(path).budget(URL, 3.0, 1002.0) == 3.0


def test_an_unreadable_cache_remembers_nothing_and_an_unwritable_one_is_no_error(
    tmp_path: Path,
) -> None:
    garbage = tmp_path / "silent.json"
    garbage.write_text("not json", encoding="utf-8")
    assert Silences(garbage).budget(URL, 3.0, 1000.0) == 3.0
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    silences = Silences(blocked / "silent.json")
    silences.silent(URL, 1000.0)
    silences.save(1000.0)


def test_the_cache_lives_under_xdg_cache_home_or_home() -> None:
    assert silence_path({"XDG_CACHE_HOME": "/c"}) == Path("/c/devbox/silent-clusters.json")
    assert silence_path({"HOME": "/h"}) == Path("/h/.cache/devbox/silent-clusters.json")
