"""The sweep's results: one JSON record a line in ``sweep.jsonl``, appended (and flushed to disk) as each
point finishes, so an interrupted sweep loses no finished point. A record is keyed by its content hash; running
the sweep again skips every hash already recorded, except the points that failed (they are tried again). A
torn last line (a crash while writing) is ignored."""

from __future__ import annotations

import json
import os
from pathlib import Path

RETRIED = ("failed",)  # statuses a new run tries again


class ResultStore:
    """The records of ``path`` (the latest per hash), and appending new ones."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: dict[str, dict] = {}
        text = self.path.read_text() if self.path.is_file() else ""
        self._torn = bool(text) and not text.endswith("\n")  # end the torn line before the next record
        if text:
            for line in text.splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a crash
                if isinstance(rec, dict) and "hash" in rec:
                    self.records[rec["hash"]] = rec

    def done(self, key: str) -> bool:
        rec = self.records.get(key)
        return rec is not None and rec.get("status") not in RETRIED

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(("\n" if self._torn else "") + json.dumps(record, sort_keys=True) + "\n")
            self._torn = False
            f.flush()
            os.fsync(f.fileno())
        self.records[record["hash"]] = record
