"""The README guides: its two commands, its demo table, its snippet and its links are true.

Everything else it used to hold lives in docs/ (tests/test_docs.py runs those snippets).
"""

import re

from tests.doc_snippets import DOCS, README, ROOT, anchors, blocks, check_command, commands, python_blocks_in

TWO_COMMANDS = (
    "make demo    # creates .venv, installs, runs the main demo on the embedded default\n"
    "make test    # creates .venv (and .venv-vllm: vLLM's CPU build), runs the test suite "
    "(CI runs it, then `make test-heavy`)\n"
)


def test_the_readme_is_a_guide_not_a_notebook():
    lines = README.read_text().splitlines()
    assert 120 <= len(lines) <= 210, f"the README is {len(lines)} lines; measurements go to docs/results.md"
    assert not re.search(r"\b(second|third|fourth|fifth|sixth|seventh|eighth) machine\b", README.read_text())


def test_the_two_commands_are_stated_verbatim_and_exist():
    text = README.read_text()
    assert f"```bash\n{TWO_COMMANDS}```" in text
    assert TWO_COMMANDS in (DOCS / "index.md").read_text(), "docs/index.md repeats them word for word"
    for line in TWO_COMMANDS.splitlines():
        assert check_command(line.split("#")[0]) is None, line
    makefile = (ROOT / "Makefile").read_text()
    assert "\n\t$(VENV)/bin/ludic demo\n" in makefile and "-m pytest" in makefile


def test_the_demo_table_is_the_one_in_results():
    def demo_table(text: str) -> str:
        return re.search(r"^\| stage \| X legal .*?(?=\n\n)", text, re.S | re.M).group(0)

    assert demo_table(README.read_text()) == demo_table((DOCS / "results.md").read_text())


def test_the_library_snippet_is_the_one_docs_library_runs():
    """tests/test_docs.py runs docs/library.md's snippet; the README shows the same code."""
    (readme_snippet,) = python_blocks_in(README)
    assert readme_snippet == python_blocks_in(DOCS / "library.md", "Rollouts in a few lines")[0]


def test_the_readme_commands_exist():
    bad = [(cmd, why) for b in blocks(README) if b.lang == "bash" for cmd in commands(b.code)
           if (why := check_command(cmd))]
    assert not bad, bad


def test_every_readme_link_points_at_a_file_and_heading_that_exist():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"README links to {link}: no such file"
        if anchor:
            assert anchor in anchors(target), f"README links to {link}: no such heading"
