"""The launcher: `mesa up` on one machine (embedded PostgreSQL, migrations, every service
supervised) and the demo accounts. Nothing here runs in production; services import none of it."""
