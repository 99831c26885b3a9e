#!/bin/sh
# Run once before the workers start (compose's `migrate` service): wait for the database, then
# migrate it. Workers would also migrate on start, but several at once would race each other.
# With arguments, exec them afterwards, so this can also wrap another command.
set -eu

: "${PIPELINE_DATABASE_URL:?PIPELINE_DATABASE_URL must be set (a fresh container would migrate a throwaway SQLite file)}"
tries="${PIPELINE_DB_WAIT_TRIES:-30}"
delay="${PIPELINE_DB_WAIT_DELAY_S:-2}"

# Through the settings, so the URL is normalised exactly as the pipeline itself will read it. A
# setting that cannot work (a placeholder password, a URL that does not parse) exits 2: there is
# no database to wait for, and `pipeline` itself then names the setting in one sentence.
probe='import sys
from pydantic import ValidationError
from sqlalchemy import create_engine
from pipeline.core.settings import get_settings
try:
    url = get_settings().resolved_database_url
except ValidationError:
    sys.exit(2)
create_engine(url).connect().close()'

n=1
until timeout 10 python -c "$probe" 2>/dev/null; do
    if [ "$?" -eq 2 ]; then
        exec pipeline db upgrade  # refuses the bad setting (exit 2) before touching the database
    fi
    if [ "$n" -ge "$tries" ]; then
        echo "prestart: database not reachable after $tries tries; last error:" >&2
        timeout 10 python -c "$probe" || true
        exit 1
    fi
    echo "prestart: waiting for the database ($n/$tries)" >&2
    n=$((n + 1))
    sleep "$delay"
done

pipeline db upgrade

if [ "$#" -gt 0 ]; then
    exec "$@"
fi
