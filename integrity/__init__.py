"""Integrity: who passes money to whom, laundering patterns, bot-like play and shared devices,
raised as alerts a compliance officer reviews and acts on.

- `integrity.models`: the Structs (an alert, its evidence, the histories detectors read).
- `integrity.config`: every threshold, with its default (`MESA_INTEGRITY_*` settings).
- `integrity.detectors`: pure functions from histories to alerts (no I/O).
- `integrity.store`: the `integrity` schema's alerts, evidence, withdrawal holds and seat
  observations (SQLAlchemy Core); other detectors (deliberate losing, player reports) raise
  their alerts through `store.raise_alerts`.
- `integrity.scan`: reads the ledger's and engine's histories through their contracts,
  runs the detectors, stores the alerts; incremental and single-runner.
"""
