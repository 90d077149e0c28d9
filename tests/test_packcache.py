"""Parsed pack files are kept between launches, and a kept entry never outlives its file."""

from __future__ import annotations

import shutil

import pytest

from tutor.pack import cache as packcache
from tutor.pack.model import PackError, exercises_dir, load_pack


@pytest.fixture
def pack_copy(tmp_path):
    folder = tmp_path / "makemore"
    shutil.copytree(exercises_dir() / "makemore", folder)
    return folder


def _entries() -> list:
    return sorted(packcache.cache_dir().glob("*"))


def test_a_second_load_reads_the_kept_tables_and_gets_the_same_pack(pack_copy):
    first = load_pack.__wrapped__(pack_copy)
    kept = _entries()
    assert len(kept) == len(list(pack_copy.glob("*.toml")))
    # The kept tables are what is read now: a marker put into one shows up in the pack.
    pack_toml = (pack_copy / "pack.toml").read_bytes()
    tables = packcache.recall(pack_toml)
    assert tables is not None
    tables["pack"]["title"] = "Read from the cache"
    packcache.keep(pack_toml, tables)
    second = load_pack.__wrapped__(pack_copy)
    assert second.title == "Read from the cache"
    assert second.exercises == first.exercises


def test_an_edited_file_is_parsed_again(pack_copy):
    load_pack.__wrapped__(pack_copy)
    path = pack_copy / "pack.toml"
    path.write_text(path.read_text().replace('title = "', 'title = "Edited: ', 1))
    assert load_pack.__wrapped__(pack_copy).title.startswith("Edited: ")


def test_a_damaged_entry_is_parsed_again(pack_copy):
    expected = load_pack.__wrapped__(pack_copy).title
    for entry in _entries():
        entry.write_bytes(b"\x00not marshal")
    assert load_pack.__wrapped__(pack_copy).title == expected


def test_a_cache_folder_that_cannot_be_made_only_means_parsing(pack_copy, tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(packcache.ENV, str(blocker / "cache"))
    assert load_pack.__wrapped__(pack_copy).title
    assert not (blocker / "cache").exists()


def test_a_broken_file_is_still_named_and_never_kept(pack_copy):
    (pack_copy / "pack.toml").write_text("[pack\n")
    with pytest.raises(PackError, match="pack.toml"):
        load_pack.__wrapped__(pack_copy)
    (pack_copy / "pack.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(PackError, match="pack.toml"):
        load_pack.__wrapped__(pack_copy)
    assert packcache.recall(b"[pack\n") is None
