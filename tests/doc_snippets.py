"""The code blocks of README.md and docs/: found, and checked without running a server.

Shared by tests/test_readme.py and tests/test_docs.py. A block is a fenced block
with its language (```python, ```yaml, ```bash, ...), the file and the heading it
sits under, so a failing check names where the snippet is.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    heading: str
    lang: str
    code: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)} ({self.heading!r}, {self.lang or 'no language'})"


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _headings(text: str) -> list[re.Match]:
    """Markdown headings, not `# comments` inside fenced code."""
    fences = [m.span() for m in _FENCE.finditer(text)]
    return [h for h in _HEADING.finditer(text) if not any(a <= h.start() < b for a, b in fences)]


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    out = []
    for m in _FENCE.finditer(text):
        headings = [h.group(1) for h in _headings(text) if h.start() < m.start()]
        out.append(Block(path, headings[-1] if headings else "", m.group(1), m.group(2)))
    return out


def all_blocks(lang: str | None = None) -> list[Block]:
    return [b for p in doc_files() for b in blocks(p) if lang is None or b.lang == lang]


def section(path: Path, heading: str) -> str:
    """The text under `heading` (any level) up to the next heading of the same or a higher level."""
    text = path.read_text()
    found = _headings(text)
    start = next((i for i, h in enumerate(found) if h.group(1) == heading), None)
    assert start is not None, f"{path.name} has no heading {heading!r}"
    level = len(found[start].group(0)) - len(found[start].group(1)) - 1
    end = next((h.start() for h in found[start + 1:] if len(h.group(0)) - len(h.group(1)) - 1 <= level), len(text))
    return text[found[start].end(): end]


def python_blocks_in(path: Path, heading: str | None = None) -> list[str]:
    return [b.code for b in blocks(path) if b.lang == "python" and (heading is None or b.heading == heading)]


def import_statements(code: str) -> str:
    """Only the import statements of `code` (top level and nested), as source."""
    tree = ast.parse(code)
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(ast.unparse(n) for n in nodes)


def slug(heading: str) -> str:
    """The anchor MkDocs (toc) gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(path: Path) -> set[str]:
    return {slug(h.group(1)) for h in _headings(path.read_text())}


# ---- shell commands ------------------------------------------------------------------------

def commands(code: str) -> list[str]:
    """Shell commands of a bash block, each as a plain command line: continuation lines
    joined, comments and redirections dropped, `a && b`, `a; b`, `a | b` and
    `for ...; do a & done` split into their commands (quotes respected)."""
    out = []
    for line in re.sub(r"\\\n\s*", " ", code).splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        group: list[str] = []
        redirected = False
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|()"):
                words = [w for w in group if w not in ("do", "done", "wait", "then", "fi")]
                if words and words[0] != "for":
                    out.append(shlex.join(words))
                group, redirected = [], False
            elif token and set(token) <= set("<>"):
                redirected = True  # the rest of the command is where its output goes
            elif not redirected:
                group.append(token)
    return out


def _argv(command: str) -> list[str]:
    tokens = shlex.split(command)
    while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", tokens[0]):  # VAR=value prefixes
        tokens.pop(0)
    return tokens


def check_command(command: str) -> str | None:
    """None when the command is known and its flags exist; else why not. Commands of
    other tools (prefect, docker, redis-server, ...) are left to their own docs."""
    argv = _argv(command)
    if not argv:
        return None
    prog = argv[0]
    if prog in (".venv/bin/python", "python3", "python") and len(argv) > 1 and argv[1].startswith("benchmarks/"):
        script = ROOT / argv[1]
        if not script.is_file():
            return f"no script {argv[1]}"
        source = script.read_text()
        unknown = [f for f in argv[2:] if f.startswith("--") and f'"{f.split("=")[0]}"' not in source]
        return f"{argv[1]} takes no {unknown}" if unknown else None
    if prog == ".venv/bin/ludic":
        from flows.cli import build_parser

        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as exc:
            return f"`ludic {' '.join(argv[1:])}` is refused by the CLI's parser ({exc.code})"
        return None
    if prog == ".venv/bin/prefect":
        return _check_prefect(argv[1:])
    if prog == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        missing = [t for t in argv[1:] if t not in targets]
        return f"no Makefile target {missing}" if missing else None
    return None


def _check_prefect(args: list[str]) -> str | None:
    """Deployments named on a `prefect` command line are deployments of prefect.yaml."""
    import yaml

    deployments = {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}
    named = []
    if args[:2] == ["deployment", "run"] and len(args) > 2:
        flow, _, name = args[2].partition("/")
        if name not in deployments or deployments[name]["entrypoint"].split(":")[1] != flow:
            return f"prefect.yaml has no deployment {args[2]!r}"
    if "deploy" in args and "--name" in args:
        named.append(args[args.index("--name") + 1])
    missing = [n for n in named if n not in deployments]
    return f"prefect.yaml has no deployment {missing}" if missing else None


# ---- configs ---------------------------------------------------------------------------------

#: the required fields of the flows a YAML fragment in the docs is merged into
BASES: dict[str, dict[str, Any]] = {
    "rl_train": {"model_path": "m", "env": {"name": "tic_tac_toe"}},
    "sft": {"model_path": "m", "dataset_path": "d"},
    "evaluate": {"policy": {"kind": "model", "model_path": "m"}, "env": {"name": "tic_tac_toe"}},
    "rejection_sampling": {"env": {"name": "tic_tac_toe"},
                           "teacher": {"kind": "scripted", "policy": "tic_tac_toe_minimax"}},
}


def flow_of(code: str) -> str | None:
    """The flow a YAML block says it is for (`ludic run FLOW --config ...` in its comment)."""
    m = re.search(r"ludic run (\w+) --config", code)
    return m.group(1) if m else None


def validate_yaml(code: str) -> list[tuple[str, Any]]:
    """(flow, validated config) for each flow whose config takes this YAML: the whole
    config when the block names its flow, else the fragment over a flow's required fields."""
    import yaml

    from flows.cli import load_flow

    data = yaml.safe_load(code)
    assert isinstance(data, dict), "a YAML block in the docs is a mapping"
    named = flow_of(code)
    if named:
        return [(named, load_flow(named)[1].model_validate(data))]
    ok = []
    for flow, base in BASES.items():
        try:
            ok.append((flow, load_flow(flow)[1].model_validate({**base, **data})))
        except ValueError:
            continue
    return ok
