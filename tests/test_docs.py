"""The README and the guides stay short where they promise to, and every link in
them leads somewhere: a relative link names an existing file (and, with a
``#fragment``, a heading of that file), every test a doc names as its evidence
exists, every ``tfx-bridge <verb>`` the README's examples run is a verb the
console script's parser knows, and the CLI guide names only flags its verbs take.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) or [text](target "title"); images (![alt](target)) too.
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_VERB = re.compile(r"(?:^|[\s;&|(])tfx-bridge\s+([a-z][a-z0-9-]*)")
# `tests/x/test_y.py`, `x/test_y.py::test_z`, or `::test_z` after one of them on a line.
_TEST_REF = re.compile(r"`((?:[\w.-]+/)*test_\w+\.py)?(?:::(test_\w+))?`")


def _docs() -> List[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def _split_code(text: str) -> Tuple[List[str], List[str]]:
    """(prose lines, lines inside fenced code blocks)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, punctuation other than
    ``-`` and ``_`` dropped (inline-code backticks included), spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    """Every heading fragment of a Markdown file; repeated headings get ``-1``,
    ``-2``, ... as on GitHub."""
    seen: Dict[str, int] = {}
    out = set()
    prose, _ = _split_code(path.read_text(encoding="utf-8"))
    for line in prose:
        m = _HEADING.match(line)
        if not m:
            continue
        base = anchor(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> List[Tuple[int, str]]:
    """(line number, target) of every link outside code that is not a URL."""
    found = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in _LINK.finditer(_INLINE_CODE.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            found.append((number, target))
    return found


def broken_links(path: Path) -> List[str]:
    broken = []
    for number, target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target!r}"
        if not linked.exists():
            broken.append(f"{where}: no such file ({linked})")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{where}: {linked.name} has no heading #{fragment} "
                          f"(headings: {sorted(anchors(linked))})")
    return broken


def missing_tests(path: Path) -> List[str]:
    """Test files and test functions a doc names that do not exist. A path is taken
    from the repository root or from ``tests/``; ``::test_name`` alone refers to the
    last file named before it on the same line."""
    missing = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        current = None
        for m in _TEST_REF.finditer(line):
            file_part, name = m.groups()
            if file_part:
                found = [c for c in (ROOT / file_part, ROOT / "tests" / file_part) if c.is_file()]
                current = found[0] if found else None
                if current is None:
                    missing.append(f"{path.name}:{number}: no test file {file_part}")
                    continue
            if name and current is not None and not re.search(
                    rf"^\s*(?:async\s+)?def {name}\(", current.read_text(encoding="utf-8"),
                    re.MULTILINE):
                missing.append(f"{path.name}:{number}: {current.name} has no {name}")
    return missing


def _verb_parsers() -> Dict[str, argparse.ArgumentParser]:
    from tfx_bridge.cli.main import build_parser

    parser = build_parser()
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers[0].choices)


def _parser_verbs() -> Set[str]:
    return set(_verb_parsers())


def _readme_example_verbs() -> Set[str]:
    _, code = _split_code(README.read_text(encoding="utf-8"))
    return {m.group(1) for line in code for m in _VERB.finditer(line.split("#", 1)[0])}


def test_readme_line_count_at_most_the_limit():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, over {README_MAX_LINES}: move reference material "
        "to a guide under docs/guides/ and link it.")


def test_anchor_heading_with_code_and_punctuation_as_github_writes_it():
    assert anchor("The `run_fn` contract") == "the-run_fn-contract"
    assert anchor("Two modes: train in the pipeline, or hand over weights") == (
        "two-modes-train-in-the-pipeline-or-hand-over-weights")
    assert anchor("Scheduled runs: locks, spans, exit codes") == (
        "scheduled-runs-locks-spans-exit-codes")


def test_anchors_repeated_heading_numbered(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Top\n## Notes\n```\n# not a heading\n```\n## Notes\n", encoding="utf-8")
    assert anchors(doc) == {"top", "notes", "notes-1"}


def test_broken_links_missing_file_and_heading_named(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# Here\n", encoding="utf-8")
    doc = tmp_path / "a.md"
    doc.write_text("[ok](b.md#here) [gone](c.md) [no heading](b.md#there) "
                   "`[code](x.md)` [web](https://example.com/x.md)\n", encoding="utf-8")
    found = broken_links(doc)
    assert len(found) == 2, found
    assert "'c.md': no such file" in found[0]
    assert "has no heading #there" in found[1]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_relative_links_lead_to_existing_files_and_headings(doc):
    broken = broken_links(doc)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_missing_tests_renamed_test_and_missing_file_named(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_kept():\n    pass\n")
    doc = tmp_path / "d.md"
    doc.write_text("| `test_a.py::test_kept`, `::test_renamed` | `tests/test_gone.py` |\n",
                   encoding="utf-8")
    assert missing_tests(doc) == ["d.md:1: test_a.py has no test_renamed",
                                  "d.md:1: no test file tests/test_gone.py"]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_named_tests_exist(doc):
    missing = missing_tests(doc)
    assert not missing, "tests named in the docs that do not exist:\n" + "\n".join(missing)


def test_readme_links_to_every_guide():
    linked = {(README.parent / t.partition("#")[0]).resolve()
              for _, t in relative_links(README) if t.partition("#")[0]}
    guides = set((ROOT / "docs" / "guides").glob("*.md"))
    assert guides, "no guides under docs/guides/"
    missing = sorted(str(g.relative_to(ROOT)) for g in guides - linked)
    assert not missing, f"guides the README does not link: {missing}"


def test_readme_examples_verbs_known_to_the_parser():
    named = _readme_example_verbs()
    assert named, "no `tfx-bridge <verb>` found in README's code blocks"
    unknown = sorted(named - _parser_verbs())
    assert not unknown, f"README runs verbs the CLI does not have: {unknown}"


def test_cli_guide_flags_known_to_each_verb():
    """Each verb's row in the CLI guide names only flags that verb takes."""
    rows = re.findall(r"^\| `tfx-bridge ([a-z][a-z0-9-]*)([^|]*(?:\\\|[^|]*)*)` \|",
                      (ROOT / "docs" / "guides" / "cli.md").read_text(encoding="utf-8"),
                      re.MULTILINE)
    parsers = _verb_parsers()
    assert {verb for verb, _ in rows} == set(parsers), "one row per verb"
    unknown = [f"{verb} {flag}" for verb, usage in rows
               for flag in re.findall(r"--[a-z][a-z-]*", usage)
               if flag not in parsers[verb]._option_string_actions]
    assert not unknown, f"flags the CLI guide names that the verb does not take: {unknown}"


def test_readme_examples_cover_every_verb():
    missing = sorted(_parser_verbs() - _readme_example_verbs())
    assert not missing, f"verbs without an example in README: {missing}"
