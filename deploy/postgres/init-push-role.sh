#!/usr/bin/env bash
# Runs once, when the compose PostgreSQL initializes its data directory (/docker-entrypoint-initdb.d):
# creates the role the services use, `push`, with the password in $PUSH_PG_PASSWORD_FILE. It is no
# superuser and owns only the schema `push` of database `push` (its search_path), where the
# dispatcher's migrations create the tables; it cannot create databases, roles or objects in `public`.
set -euo pipefail
password=$(tr -d '\r\n' <"${PUSH_PG_PASSWORD_FILE:?PUSH_PG_PASSWORD_FILE is required}")
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -v pw="$password" <<'SQL'
CREATE ROLE push LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD :'pw';
REVOKE ALL ON DATABASE push FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE push TO push;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE SCHEMA push AUTHORIZATION push;
ALTER ROLE push IN DATABASE push SET search_path = push;
SQL
