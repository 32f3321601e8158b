from services.common.alembic_env import run_migrations

run_migrations(schema="integrity")
