"""Alembic migrations; `pipeline db upgrade` applies them."""
