"""The one atomic-write helper: whole files or none, never through a link, the umask's permissions."""

from __future__ import annotations

import os

import pytest

from harness.files import open_atomic, umask, write_atomic


def test_text_and_bytes_land_whole(tmp_path):
    write_atomic(tmp_path / "t.txt", "héllo\n")
    write_atomic(tmp_path / "b.bin", b"\x00\xff")
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.bin", "t.txt"]  # no temp file left


def test_a_failure_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="boom"):
        with open_atomic(target, "w") as f:
            f.write("half of the new")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_link_at_the_destination_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "table.md"
    link.symlink_to(victim)
    write_atomic(link, "table")
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "table"


def test_the_file_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        assert umask() == 0o027
        write_atomic(tmp_path / "a", "x", fsync=True)
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o640


def test_an_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"):
        with open_atomic(tmp_path / "x", "a"):
            pass


def test_text_lines_is_the_one_line_reader_and_names_a_bad_file(tmp_path):
    from harness.errors import UserInputError
    from harness.files import text_lines

    p = tmp_path / "c.txt"
    p.write_bytes(b" a \r\n\n \t \nb\n c")
    assert list(text_lines(p)) == [" a ", "b", " c"]
    assert list(text_lines(p, strip=True)) == ["a", "b", "c"]
    assert list(text_lines(p, limit=2)) == [" a ", "b"]
    assert list(text_lines(p, limit=0)) == []
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9\n")
    with pytest.raises(UserInputError, match=r"corpus .*latin1\.txt is not valid UTF-8"):
        list(text_lines(bad, what="corpus"))
    with pytest.raises(UserInputError, match=r"corpus not found: .*missing\.txt"):
        list(text_lines(tmp_path / "missing.txt", what="corpus"))
    with pytest.raises(UserInputError, match="is a directory"):
        list(text_lines(tmp_path, what="corpus"))
