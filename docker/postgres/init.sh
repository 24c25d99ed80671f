#!/usr/bin/env bash
# Run once by the postgres image on an empty data directory (docker-entrypoint-initdb.d), as
# $POSTGRES_USER: the MLflow database, and a role for the leaderboard that can only read.
set -euo pipefail

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v mlflow_db="$MLFLOW_DB" -v owner="$POSTGRES_USER" -v db="$POSTGRES_DB" \
    -v reader="$LEADERBOARD_USER" -v reader_password="$LEADERBOARD_PASSWORD" <<'SQL'
CREATE DATABASE :"mlflow_db" OWNER :"owner";
CREATE ROLE :"reader" LOGIN PASSWORD :'reader_password';
ALTER ROLE :"reader" SET default_transaction_read_only = on;
GRANT CONNECT ON DATABASE :"db" TO :"reader";
GRANT USAGE ON SCHEMA public TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
SQL
