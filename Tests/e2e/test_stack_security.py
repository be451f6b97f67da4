"""The local stack (scripts/up) runs the way the compose file does: the dispatcher connects to
PostgreSQL as the role `push` (no superuser, owner of only the schema `push`, password required) and
the generated secrets are readable by their owner only."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pushstack as stack


def test_the_database_role_is_not_a_superuser_and_owns_only_its_schema():
    [[user, schema, superuser, create_db, create_role]] = stack.psql(
        "SELECT current_user, current_schema, rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")
    assert (user, schema, superuser, create_db, create_role) == ("push", "push", "f", "f", "f")
    tables = stack.psql("SELECT schemaname FROM pg_tables WHERE tablename IN ('device_tokens', 'send_log')")
    assert tables == [["push"], ["push"]]
    denied = subprocess.run(["psql", stack.stack_env()["PUSH_PG_URL"], "-c", "CREATE TABLE public.intruder (x int)"],
                            capture_output=True, text=True)
    assert denied.returncode != 0 and "permission denied" in denied.stderr


def test_the_role_needs_its_password():
    url = stack.stack_env()["PUSH_PG_URL"].split("?")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGPASSFILE"] = "/nonexistent"
    refused = subprocess.run(["psql", url, "-c", "SELECT 1"], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "password" in refused.stderr


def test_the_dispatcher_reads_its_password_from_a_file_and_secrets_are_owner_only():
    pid = (stack.VAR_DIR / "run" / "dispatcher.pid").read_text().strip()
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    assert re.fullmatch(r"postgresql://push@127\.0\.0\.1:\d+/push", environ["PUSH_PG_URL"])
    assert Path(environ["PUSH_PG_PASSWORD_FILE"]).exists()
    credentials = stack.VAR_DIR / "credentials"
    for name in ["apns-key.p8", "apns-key-2.p8", "apns-key-3.p8", "simulator-key.pem", "pg-push-password", "pgpass"]:
        assert (credentials / name).stat().st_mode & 0o777 == 0o600, name
