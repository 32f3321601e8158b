"""What a schema's baseline migration applies besides its tables: PL/pgSQL functions kept as
source files (one function per `.sql` file, named after it) and plain DDL statements.

Each component's SQLAlchemy `MetaData` is the source of truth for its tables; its baseline
creates them from it (`create_tables`), then the functions from its `sql/` folder, then the
triggers and grants metadata cannot express. Nothing edits SQL text: a change to a function
is a change to its file (and a migration that applies that file again).
"""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

# A function file holds exactly one CREATE OR REPLACE FUNCTION (as pg_get_functiondef shows it).
_HEADER = re.compile(r"\ACREATE OR REPLACE FUNCTION (\w+)\.(\"?\w+\"?)\(", re.ASCII)
MAX_FUNCTION_FILES = 200


def function_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.sql"))
    if not files or len(files) > MAX_FUNCTION_FILES:
        raise ValueError(f"{folder}: expected 1..{MAX_FUNCTION_FILES} function files")
    return files


def function_sources(folder: Path, schema: str) -> dict[str, str]:
    """name -> definition (without the final semicolon), checked to be one function of
    `schema` named like its file."""
    out: dict[str, str] = {}
    for path in function_files(folder):
        text = path.read_text(encoding="utf-8").strip()
        match = _HEADER.match(text)
        if match is None or not text.endswith(";"):
            raise ValueError(f"{path}: not one CREATE OR REPLACE FUNCTION statement")
        name = match.group(2).strip('"')
        if match.group(1) != schema or name != path.stem:
            raise ValueError(f"{path}: defines {match.group(1)}.{name}, not {schema}.{path.stem}")
        out[name] = text[:-1].rstrip()
    return out


def create_tables(bind: Connection, metadata: sa.MetaData) -> None:
    metadata.create_all(bind, checkfirst=False)


def apply_functions(bind: Connection, folder: Path, schema: str) -> None:
    # Functions may call one another in any file order: bodies are checked when first run.
    bind.exec_driver_sql("SET LOCAL check_function_bodies = off")
    for source in function_sources(folder, schema).values():
        bind.exec_driver_sql(source)
    bind.exec_driver_sql("SET LOCAL check_function_bodies = on")


def execute_all(bind: Connection, statements: tuple[str, ...]) -> None:
    for statement in statements:
        bind.exec_driver_sql(statement)


def drop_schema_objects(bind: Connection, metadata: sa.MetaData, schema: str) -> None:
    """Undo a baseline: tables (with their triggers), then the schema's functions and types.
    The schema itself stays, holding Alembic's version table."""
    if not re.fullmatch(r"[a-z_]+", schema):
        raise ValueError(f"unexpected schema name {schema!r}")
    metadata.drop_all(bind, checkfirst=False)
    bind.exec_driver_sql(
        f"""
        DO $$
        DECLARE f regprocedure;
        BEGIN
          FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = '{schema}'::regnamespace
          LOOP
            EXECUTE 'DROP FUNCTION ' || f::text;
          END LOOP;
        END $$
        """  # noqa: S608 (`schema` is the component's own schema name, not input)
    )
