"""Storage: SQLAlchemy models, engines and migrations, and the repository functions."""
