"""scripts/accuracy.py's command line: where it writes, and a bad output path (no measuring)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "accuracy.py"


def test_defaults_are_the_repository_docs_wherever_it_runs(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "default: this repository's docs/accuracy.md" in r.stdout
    import accuracy  # noqa: E402 (scripts/ is on the test path)
    assert accuracy.DOCS == SCRIPT.parents[1] / "docs" and (accuracy.DOCS / "accuracy.md").is_file()


def test_missing_output_folder_is_one_line_before_any_work(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--md", str(tmp_path / "no" / "x.md")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"falcon-accuracy: error: {tmp_path / 'no' / 'x.md'}: "
                                             "no such directory to write into"]
    assert not (tmp_path / "no").exists()


def test_main_sweep_keeps_the_narrow_section_and_what_follows(tmp_path):
    """The main sweep rewrites the head of the file; the --narrow section and the hand-written sections after
    it stay as they were (they were dropped before)."""
    import accuracy  # noqa: E402
    md = tmp_path / "acc.md"
    tail = f"{accuracy.NARROW_BEGIN}\n## narrow\n| a |\n{accuracy.NARROW_END}\n\n## Scaled f16 operands\ntext 7\n"
    md.write_text("# old head\nold table\n\n" + tail)
    assert accuracy._kept_narrow(str(md)) == tail.rstrip("\n")
    md.write_text("# only a head\n")
    assert accuracy._kept_narrow(str(md)) == ""


def test_broken_markers_are_one_line_before_any_work(tmp_path):
    """One marker missing (or the end marker first): a main sweep dropped the narrow section and every
    hand-written section after it, --narrow appended a second section; now one line, file untouched."""
    import accuracy  # noqa: E402
    b, e = accuracy.NARROW_BEGIN, accuracy.NARROW_END
    for text, counts in ((f"# head\n{b}\n## narrow\n\n## Scaled f16 operands\n", "1 begin and 0 end line(s);"),
                         (f"# head\n{e}\n{b}\n", "1 begin and 1 end line(s) (end first);"),
                         (f"# head\n{b}\n{e}\n{b}\n{e}\n", "2 begin and 2 end line(s);")):
        md = tmp_path / "acc.md"
        md.write_text(text)
        for extra in ([], ["--narrow"]):
            r = subprocess.run([sys.executable, str(SCRIPT), "--quick", *extra, "--md", str(md)],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
            line, = r.stderr.strip().splitlines()
            assert line.startswith(f"falcon-accuracy: error: {md}: the narrow-result markers are {counts}"), line
            assert md.read_text() == text
    md.write_text(f"# head\n{b}\n{e}\n")
    accuracy.check_markers(str(md))
    accuracy.check_markers(str(tmp_path / "absent.md"))
