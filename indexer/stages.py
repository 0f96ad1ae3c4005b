"""A build's finished stages, kept in its temporary folder so that ``--resume`` continues a build cut off.

The temporary folder of a build holds ``stages.json``: what the build was asked for (its inputs by path, size and
modification time, and the options that shape the index), its build id and start, and for each finished stage
(``ingest``: the store and its lookups; then each channel) the stage's result and the sha256 of every file it
wrote. A resumed build takes a stage's result only when every one of its files is still there with the same
checksum; the first stage that does not check out, and every stage after it, is built again. The final swap into
place stays atomic, and a build without ``--resume`` removes such folders and starts clean.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wikiground.layout import atomic_write_json, build_tmp_prefix

logger = logging.getLogger(__name__)

JOURNAL_FILE = "stages.json"
JOURNAL_VERSION = 1


def fingerprint(paths: Iterable[Path], options: Mapping[str, Any], version: str) -> dict[str, Any]:
    """What must be the same for a build to continue another: its inputs as they are on disk now, the options
    that shape the index, and the tool's version."""
    inputs = []
    for p in paths:
        st = p.stat()
        inputs.append({"path": str(p.absolute()), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return {"inputs": inputs, "options": _plain(options), "version": version}


def _plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (paths as strings)."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _files(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """relative path -> sha256 of every file under ``names`` (files or folders of ``folder``)."""
    out: dict[str, str] = {}
    for name in names:
        root = folder / name
        found = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]
        for f in found:
            out[f.relative_to(folder).as_posix()] = _sha256(f)
    return out


class StageJournal:
    """``stages.json`` of one temporary build folder."""

    def __init__(self, folder: Path, data: dict[str, Any]):
        self.folder = folder
        self.data = data

    @classmethod
    def new(cls, folder: Path, print_: dict[str, Any], build_id: str, started: float) -> StageJournal:
        data = {"version": JOURNAL_VERSION, "fingerprint": print_, "build_id": build_id, "started": started}
        journal = cls(folder, {**data, "stages": {}, "order": []})
        journal._save()
        return journal

    @classmethod
    def find(cls, out: Path, print_: dict[str, Any]) -> StageJournal | None:
        """The newest temporary folder of a build of ``out`` with the same fingerprint, else None."""
        found = []
        for entry in out.parent.glob(build_tmp_prefix(out) + "*"):
            try:
                data = json.loads((entry / JOURNAL_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("version") == JOURNAL_VERSION and data.get("fingerprint") == print_:
                found.append((entry.stat().st_mtime, entry, data))
        if not found:
            return None
        _, folder, data = max(found, key=lambda t: t[0])
        return cls(folder, data)

    @property
    def build_id(self) -> str:
        return self.data["build_id"]

    @property
    def started(self) -> float:
        return float(self.data["started"])

    @property
    def finished(self) -> list[str]:
        """The finished stages, in the order they finished."""
        return list(self.data["order"])

    def done(self, stage: str, options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The stage's recorded result when it finished with the same ``options`` and its files still check out;
        else None, and the stage and all after it are forgotten (they are built again)."""
        record = self.data["stages"].get(stage)
        if record is None:
            return None
        try:
            same = record.get("options") == _plain(options) and (
                _files(self.folder, {name.split("/")[0] for name in record["files"]}) == record["files"]
            )
        except OSError:
            same = False
        if same:
            logger.info("resume: %s kept from %s", stage, self.folder)
            return record["result"]
        logger.warning("resume: %s in %s does not check out: building it again", stage, self.folder)
        order = self.data["order"]
        for later in order[order.index(stage) :]:
            del self.data["stages"][later]
        del order[order.index(stage) :]
        self._save()
        return None

    def finish(
        self, stage: str, result: Mapping[str, Any], outputs: Iterable[str], options: Mapping[str, Any] | None = None
    ) -> None:
        """Record ``stage`` as finished with its ``result``, the ``options`` it was built with and the checksums
        of its ``outputs`` (names in the folder)."""
        record = {
            "result": dict(result),
            "options": _plain(options),
            "files": _files(self.folder, outputs),
            "finished": time.time(),
        }
        self.data["stages"][stage] = record
        self.data["order"] = [*(s for s in self.data["order"] if s != stage), stage]
        self._save()

    def _save(self) -> None:
        atomic_write_json(self.folder / JOURNAL_FILE, self.data, sort_keys=True)
