"""The README's own blocks, run as a new user would run them, against the stack scripts/up started
(`scripts/test readme` runs only this file): the quick start's demo, every line of the pushctl block,
and the second-stack block on free ports (no rebuild: the build the stack runs on is reused).

Only what a reader cannot type as printed is replaced: the release binary by the stack's build,
`/var/tmp/push-dev` by the stack's PUSH_VAR_DIR, the elided token `3f4a…e9` by a real one, the
elided request id `0b6f…` by the id the line before printed, and `pushctl follow` gets `--timeout`."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import uuid
from pathlib import Path


import pushstack as stack
from test_scripts import second_stack_env

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BIN = Path(os.environ.get("PUSH_BIN_DIR", ROOT / ".build" / "debug"))


def block_after(marker: str) -> list[str]:
    """The lines of the first fenced block after `marker` (continuations joined, comments dropped)."""
    start = README.index(marker)
    fence = README.index("```", start)
    body = README[README.index("\n", fence) + 1:README.index("```", fence + 3)]
    body = re.sub(r"\\\n\s*", "", body)
    lines = []
    for raw in body.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            lines.append(re.sub(r"\s+#\s.*$", "", line))
    return lines


def test_the_quick_start_demo_delivers_on_the_stack():
    assert block_after("## Quick start") == ["scripts/up"]
    done = subprocess.run(["python3", str(ROOT / "scripts" / "demo")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PUSH_VAR_DIR": str(stack.VAR_DIR)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DELIVERED" in done.stdout or "delivered" in done.stdout, done.stdout


def test_every_line_of_the_pushctl_block_works():
    lines = block_after("## pushctl")
    alias = lines[0]
    assert alias.startswith('alias pushctl=".build/release/pushctl --env-file /var/tmp/push-dev/stack.env"'), alias
    pushctl = [str(BIN / "pushctl"), "--env-file", str(stack.VAR_DIR / "stack.env")]
    token = stack.random_token()
    last_request = str(uuid.uuid4())
    try:
        for line in lines[1:]:
            words = shlex.split(line)
            assert words[0] == "pushctl", line
            words = [token if w == "3f4a…e9" else last_request if w == "0b6f…" else w for w in words[1:]]
            if words[0] == "follow":
                words += ["--timeout", "5"]
            if words[0] == "token" and words[1] == "show":
                stack.wait_for(lambda: subprocess.run(pushctl + words, capture_output=True).returncode == 0, "the token row")
            done = subprocess.run(pushctl + words, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
            sent = re.search(r"sent request (\S+)", done.stdout)
            if sent:
                last_request = sent.group(1)
    finally:
        subprocess.run(pushctl + ["sim", "faults", "--clear"], capture_output=True)


def test_the_second_stack_block_starts_and_stops_a_second_stack(tmp_path):
    lines = block_after("- To run a second stack beside the first")
    assert lines[0].startswith("export ") and lines[1:] == ["scripts/up --no-demo", "scripts/down"], lines
    assignments = dict(item.split("=", 1) for item in shlex.split(lines[0])[1:])
    # The README's ports and directory may be taken on this machine (a stack already uses them):
    # the same variables, on free ports.
    env = second_stack_env(tmp_path)
    assert set(assignments) == {k for k in env if k.startswith("PUSH_")}
    debug = (BIN.resolve().name == "debug")
    up = subprocess.run([str(ROOT / "scripts" / "up"), "--no-demo"] + (["--debug"] if debug else []), env=env,
                        capture_output=True, text=True, timeout=900, cwd=ROOT)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "up: stack running" in up.stdout
        hint = [l for l in up.stdout.splitlines() if l.startswith("up: stop the stack with: ")][0]
        for name in assignments:
            assert f"{name}={env[name]}" in hint, hint
    finally:
        down = subprocess.run([str(ROOT / "scripts" / "down")], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped dispatcher" in down.stdout
    subprocess.run(["rm", "-rf", env["PUSH_VAR_DIR"]])
