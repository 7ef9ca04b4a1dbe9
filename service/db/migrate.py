"""Alembic driven from code: `assaygate db upgrade`, the embedded start-up and the tests."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from service.settings import Settings


def alembic_config(settings: Settings, *, url: str | None = None) -> Config:
    migrations = settings.resolved_migrations_dir()
    # A checkout has alembic.ini beside migrations/; an installed wheel has none, and needs none:
    # everything it would say is set here.
    ini = migrations.parent / "alembic.ini"
    config = Config(str(ini)) if ini.is_file() else Config()
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(migrations))
    config.attributes["url"] = url or settings.database_url
    return config


def upgrade(settings: Settings, revision: str = "head", *, url: str | None = None) -> None:
    command.upgrade(alembic_config(settings, url=url), revision)


def current(settings: Settings, *, url: str | None = None) -> str | None:
    """The database's revision (None: never migrated), read as Alembic reads it."""
    from alembic.runtime.migration import MigrationContext

    from service.db.session import make_engine

    engine = make_engine(settings, url=url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def downgrade(settings: Settings, revision: str, *, url: str | None = None) -> None:
    command.downgrade(alembic_config(settings, url=url), revision)


def check(settings: Settings, *, url: str | None = None) -> None:
    """Raise if the models and the migrated schema differ (a forgotten revision)."""
    command.check(alembic_config(settings, url=url))
