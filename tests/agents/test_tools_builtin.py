"""The bundled tools: `calculator` (arithmetic without eval, every abuse bounded) and `python` (model
code in the real bubblewrap sandbox; CI's preflight installs bwrap, so nothing here is skipped or
mocked). A policy's bad or hostile call must come back as an observation, quickly, and contained."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from ludic_core.agents import ToolAgent, function_schema
from ludic_core.agents.tools import ToolCall, run_tool
from ludic_core.inference.scripted import ScriptedChatClient
from ludic_core.parsers import xml_tag_parser
from ludic_core.registry.kinds import check_kind
from ludic_core.registry.names import resolve
from ludic_core.tools import calculator, configure_python_tool, python
from ludic_core.tools import python_tool
from ludic_core.tools.python_tool import OUTPUT_CHARS
from tests.procs import host_processes_with

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"calculator": calculator, "python": python}


def call(name: str, **arguments: Any) -> tuple[bool, str]:
    return asyncio.run(run_tool(TOOLS, ToolCall("c0", name, arguments)))


# the jail process that started the call: open its memory first, then read where its maps say
PARENT_MEMORY = """import os
ppid = os.getppid()
try:
    mem = open(f'/proc/{ppid}/mem', 'rb')
    print('OPENED')
    start = int(open(f'/proc/{ppid}/maps').readline().split('-')[0], 16)
    mem.seek(start)
    print('READ', mem.read(64))
except (OSError, ValueError) as e:
    print('refused', e)
"""


# ---------------------------------------------------------------- registry and schemas


@pytest.mark.parametrize("name", ["calculator", "python"])
def test_registered_named_tools_with_documented_schemas(name):
    fn = resolve("tool", name)
    assert fn is TOOLS[name]
    check_kind("tool", fn, name)  # would raise ComponentError: bundled entries skip it, but they pass it too
    schema = function_schema(fn)["function"]
    arg = {"calculator": "expression", "python": "code"}[name]
    assert schema["name"] == name and len(schema["description"]) > 30
    assert schema["parameters"]["required"] == [arg]
    prop = schema["parameters"]["properties"][arg]
    assert prop["type"] == "string" and len(prop["description"]) > 10


# ---------------------------------------------------------------- calculator


COMPUTED = [
    ("2 + 3 * 4", "14"),
    ("(17 + 3) * 2 ** 5 / 8", "80"),  # 20 * 32 / 8: a float with an integral value prints as an integer
    ("6 / 3", "2"),
    ("7 // 2", "3"),
    ("-7 // 2", "-4"),
    ("7 % 3", "1"),
    ("-7 % 3", "2"),
    ("1 / 3", "0.333333333333"),
    ("0.1 + 0.2", "0.3"),
    ("2 ** -2", "0.25"),
    ("2 ** 10", "1024"),
    ("2 ** 0.5", "1.41421356237"),
    ("-(3 - 5)", "2"),
    ("+4", "4"),
    ("1.5e3", "1500"),
    ("1e20", "1e+20"),
    ("123456789 * 987654321", "121932631112635269"),  # exact integer arithmetic, beyond a float's digits
    ("10 ** 99", "1" + "0" * 99),  # the largest size allowed: 100 digits
    ("  (1 + 2)  ", "3"),
    ("(" * 90 + "1" + ")" * 90, "1"),  # nesting within the length limit
    ("-" * 199 + "1", "-1"),
]


@pytest.mark.parametrize("expression, expected", COMPUTED, ids=[c[0][:30] for c in COMPUTED])
def test_calculator_computes(expression, expected):
    assert calculator(expression) == expected
    assert call("calculator", expression=expression) == (True, expected)


ATTACKS = [
    ("9**9**9", "result too large: 9 ** 387420489 has more than 100 digits"),
    ("9 ** 9 ** 9 ** 9", "result too large"),
    ("10 ** 10 ** 10", "result too large"),
    ("2 ** 10 ** 100", "result too large"),
    ("10 ** 100", "result too large"),
    ("10 ** 99 * 10 ** 99", "result too large"),
    ("1e99 * 1e99", "result too large"),
    ("1e300", "result too large"),
    ("1e99 ** 3", "result too large"),
    ("1" * 150, "result too large"),
    ("__import__('os').system('id')", "function calls not allowed"),
    ("().__class__.__bases__", "attribute access not allowed"),
    ("(1).real", "attribute access not allowed"),
    ("x + 1", "names not allowed"),
    ("lambda: 1", "lambdas not allowed"),
    ("(lambda: 1)()", "function calls not allowed"),
    ("[x for x in range(9)]", "comprehensions not allowed"),
    ("(x for x in ())", "comprehensions not allowed"),
    ("(y := 3)", "assignments not allowed"),
    ("[1, 2][0]", "indexing not allowed"),
    ("1 < 2", "comparisons not allowed"),
    ("1 if 1 else 2", "conditionals not allowed"),
    ("1 << 1000", "the operator LShift not allowed"),
    ("'a' * 10", "'a' is not a number"),
    ("True + 1", "True is not a number"),
    ("1j", "1j is not a number"),
    ("1e400", "not a finite number"),
    ("(-8) ** 0.5", "not a real number"),
    ("1 / 0", "division by zero in 1 / 0"),
    ("5 // (3 - 3)", "division by zero"),
    ("5 % 0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("1 +", "not a valid expression"),
    ("1; import os", "not a valid expression"),
    ("import os", "not a valid expression"),
    ("1\x00", "not a valid expression"),
    ("", "expression is empty"),
    ("1" * 201, "expression is 201 characters long; at most 200 are allowed"),
    ("(" * 10000 + "1" + ")" * 10000, "expression is 20,001 characters long"),
    ("-" * 10000 + "1", "characters long"),
]


@pytest.mark.parametrize("expression, message", ATTACKS, ids=[a[0][:30] for a in ATTACKS])
def test_calculator_refuses_abuse_quickly_with_a_readable_error(expression, message):
    start = time.monotonic()
    ok, content = call("calculator", expression=expression)
    assert time.monotonic() - start < 0.5
    assert not ok
    assert content.startswith("Error: tool 'calculator' raised ValueError: "), content
    assert message in content, content
    with pytest.raises(ValueError):
        calculator(expression)


def test_calculator_arguments_of_the_wrong_type_are_observations():
    assert call("calculator", expression=5) == (
        False, "Error: bad arguments for tool 'calculator': argument 'expression' must be string, got int 5")
    ok, content = call("calculator", expression=["1+1"])
    assert not ok and "must be string" in content
    ok, content = call("calculator")
    assert not ok and "missing a required argument: 'expression'" in content
    with pytest.raises(ValueError, match="must be a string"):
        calculator(5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- python (real bubblewrap)


@pytest.fixture(scope="module")
def sandbox():
    """One pool for the module (fresh bubblewrap sandbox per call, 4 at once); closed after."""
    configure_python_tool(concurrency=4)
    yield
    python_tool._close_pool()


def py(code: str) -> str:
    return asyncio.run(python(code))


def test_python_prints_and_reports_failures(sandbox):
    assert py("print(6 * 7)") == "42"
    out = py("def f():\n    return 1 / 0\nf()")
    assert "Traceback (most recent call last)" in out and "ZeroDivisionError: division by zero" in out
    assert out.endswith("[exit status 1]")
    assert py("import sys\nprint('partial')\nsys.exit(3)") == "partial\n[exit status 3]"
    assert "[no output" in py("x = 1")
    ok, content = call("python", code="import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert ok and content == "out\nerr"
    assert call("python", code=7) == (False, "Error: bad arguments for tool 'python': argument 'code' must be "
                                             "string, got int 7")


def test_python_keeps_no_state_between_calls(sandbox):
    assert py("x = 41\nprint(x + 1)") == "42"
    out = py("print(x)")
    assert "NameError: name 'x' is not defined" in out


def test_python_hostile_calls_are_contained(sandbox, tmp_path, monkeypatch):
    """Table-driven: each attempt's `escaped(output)` says whether it got out; none may."""
    secret = secrets.token_hex(12)
    monkeypatch.setenv("LUDIC_TOOL_TEST_SECRET", secret)
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret)
    host_target = tmp_path / "written-from-the-sandbox"
    bomb_token, sleeper_token = secrets.token_hex(8), secrets.token_hex(8)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    read_file = ("try:\n    data = open({path!r}, 'rb').read()\n"
                 "    print('READ', len(data), data[:200])\nexcept OSError as e:\n    print('refused', e)")

    def read_of(path: str) -> str:
        return read_file.format(path=path)

    def read_ok(out: str) -> bool:
        return "READ" in out

    attempts: list[tuple[str, str, Callable[[str], bool]]] = [
        ("infinite loop", "while True:\n    pass",
         lambda out: not ("[timed out" in out or "SIGXCPU" in out or "SIGKILL" in out)),
        ("sleep forever", "import time\ntime.sleep(3600)\nprint('woke')", lambda out: "[timed out" not in out),
        ("fork bomb", f"import os\n# {bomb_token}\nwhile True:\n    try:\n        os.fork()\n"
                      "    except OSError:\n        pass", lambda out: "[timed out" not in out and "killed" not in out),
        ("memory bomb", "x = bytearray(10 * 1024 ** 3)\nprint('ALLOCATED')", lambda out: "ALLOCATED" in out),
        ("huge output", "import sys\nfor _ in range(10 ** 9):\n    sys.stdout.write('y' * 65536)",
         lambda out: len(out) > OUTPUT_CHARS + 200 or "[truncated" not in out),
        ("huge print", "print('z' * 10 ** 7)", lambda out: len(out) > OUTPUT_CHARS + 200 or "[truncated" not in out),
        ("connect outside", "import socket\ns = socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
                            "print('CONNECTED')", lambda out: "CONNECTED" in out),
        ("connect to a host listener", f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), "
                                       "timeout=2)\nprint('CONNECTED')", lambda out: "CONNECTED" in out),
        ("read the project", read_of(str(ROOT / "pyproject.toml")), read_ok),
        ("list the project", f"import os\nprint(os.listdir({str(ROOT)!r}))", lambda out: "pyproject.toml" in out),
        ("read /etc/shadow", read_of("/etc/shadow"), read_ok),
        ("read /etc/passwd", read_of("/etc/passwd"), read_ok),
        ("read the host's ssh keys", read_of("/root/.ssh/id_rsa"), read_ok),
        ("read /proc/1/environ", read_of("/proc/1/environ"), lambda out: secret in out or read_ok(out)),
        ("read the parent's memory", PARENT_MEMORY, lambda out: "OPENED" in out or read_ok(out)),
        ("read the test process's environ", read_of(f"/proc/{os.getpid()}/environ"), lambda out: secret in out),
        ("read every process's environ", "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                                         "        try:\n            print(open(f'/proc/{p}/environ', 'rb').read())\n"
                                         "        except OSError as e:\n            print(e)",
         lambda out: secret in out),
        ("own environment", "import os\nprint(dict(os.environ))",
         lambda out: secret in out or "LUDIC_TOOL_TEST_SECRET" in out),
        ("read the test's secret file", read_of(str(secret_file)), lambda out: secret in out or read_ok(out)),
        ("write a host file", f"open({str(host_target)!r}, 'w').write('x')\nprint('WROTE')",
         lambda out: "WROTE" in out or host_target.exists()),
        ("write into the interpreter", "import os\nopen(os.__file__ + '.evil', 'w').write('x')\nprint('WROTE')",
         lambda out: "WROTE" in out),
        ("kill its parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('KILLED')",
         lambda out: "KILLED" in out),
        ("a process that outlives the call",
         f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time  # {sleeper_token}\\n"
         "time.sleep(60)'], start_new_session=True)\nprint('spawned')", lambda out: False),  # checked below
    ]

    async def run_all() -> list[str]:
        return list(await asyncio.gather(*(python(code) for _, code, _ in attempts)))

    start = time.monotonic()
    try:
        outputs = asyncio.run(run_all())
        listener.settimeout(0.2)
        try:
            listener.accept()
            reached_listener = True
        except socket.timeout:
            reached_listener = False
    finally:
        listener.close()
    elapsed = time.monotonic() - start
    time.sleep(0.3)
    escapes = [name for (name, _, escaped), out in zip(attempts, outputs) if escaped(out)]
    if reached_listener:
        escapes.append("connect to a host listener (accepted)")
    if host_processes_with(bomb_token):
        escapes.append("fork bomb (processes left on the host)")
    if host_processes_with(sleeper_token):
        escapes.append("a process that outlives the call (still running)")
    # the write-then-read check: a file left by one call is gone in the next
    token = secrets.token_hex(8)
    assert py(f"open('/tmp/kept', 'w').write({token!r})\nopen('kept2', 'w').write({token!r})\n"
              "print(open('/tmp/kept').read())") == token
    later = py("import os\nfor p in ('/tmp/kept', 'kept2'):\n    print(p, os.path.exists(p))\n"
               "print(os.listdir('/tmp'))")
    if token in later or "True" in later:
        escapes.append("a file kept between calls")

    report = {name: out[:160] for (name, _, _), out in zip(attempts, outputs)}
    assert escapes == [], json.dumps(report, indent=1)
    assert len(attempts) + 1 == 24  # the attempts above plus the kept file: 24 tried, 0 escaped
    assert elapsed < 30, elapsed  # 5 s limits, 4 at once: every call came back
    assert py("print(6 * 7)") == "42"  # and the tool still serves


def test_python_through_a_tool_agent(sandbox):
    def policy(messages: list[dict[str, Any]]) -> str:
        if messages[-1]["role"] == "tool":
            return f"<answer>{messages[-1]['content']}</answer>"
        return '<tool_call>{"name": "python", "arguments": {"code": "print(6*7)"}}</tool_call>'

    client = ScriptedChatClient(policy)
    agent = ToolAgent(client, tools=[resolve("tool", "python"), resolve("tool", "calculator")],
                      parser=xml_tag_parser("answer"))
    agent.reset("Use tools.")
    agent.on_env_reset("What is 6 * 7?", {})
    action = asyncio.run(agent.act())
    tool_messages = [m for m in agent.context.messages() if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["42"] and tool_messages[0]["name"] == "python"
    assert action.action == "42"
    assert action.info["tool_calls"] == [{"name": "python", "arguments": {"code": "print(6*7)"}, "ok": True,
                                          "result": "42"}]


def test_python_never_runs_unsandboxed(monkeypatch):
    """Without bubblewrap the call fails naming it (no fallback); the unsandboxed backend is refused."""
    with pytest.raises(ValueError, match="never runs model-written code unsandboxed"):
        configure_python_tool(backend="subprocess")
    import ludic_core.envs.code_exec.sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name, *a, **k: None)
    configure_python_tool(backend="bwrap-cold")
    try:
        ok, content = call("python", code="print('ran')")
        assert not ok and "ran" not in content
        assert content.startswith("Error: tool 'python' raised SandboxError: bubblewrap is not installed"), content
    finally:
        monkeypatch.undo()
        configure_python_tool(concurrency=4)  # the module's pool again, for any test after this one
