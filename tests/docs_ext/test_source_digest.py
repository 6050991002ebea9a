"""regenerate(): a generated page is remade only when its key changes."""

from __future__ import annotations

import os

from source_digest import regenerate


def test_regenerate_runs_only_when_the_key_changes(tmp_path):
    path = tmp_path / "_generated" / "page.md"
    calls = []

    def make():
        calls.append(1)
        return "content"

    assert regenerate(path, "key-1", make)
    assert path.read_text() == "content"
    assert not regenerate(path, "key-1", make)
    assert regenerate(path, "key-2", make)
    assert len(calls) == 2


def test_unchanged_content_is_not_rewritten(tmp_path):
    path = tmp_path / "page.md"
    regenerate(path, "key-1", lambda: "same")
    an_hour_ago = path.stat().st_mtime_ns - 3600 * 10**9
    os.utime(path, ns=(an_hour_ago, an_hour_ago))
    regenerate(path, "key-2", lambda: "same")
    assert path.stat().st_mtime_ns == an_hour_ago
    assert (tmp_path / "page.key").read_text() == "key-2"
