"""Persistence: SQLAlchemy models, migrations and session-taking store functions."""
