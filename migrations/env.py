"""Alembic environment: the URL comes from the caller's config or from settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from pipeline.core.settings import get_settings
from pipeline.storage.db import get_engine
from pipeline.storage.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # `pipeline db upgrade` hands over its connection; the alembic CLI gets a fresh one.
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    with get_engine(_url()).connect() as connection:
        _run(connection)
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
