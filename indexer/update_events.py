"""``page_change`` events applied to an update (``indexer.update``): deletes become tombstones, moves and
undeletes a new revision of the page's text as the index holds it, edits and creates (no text in the event) are
noted as stale, for the live fallback to fetch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.update_inputs import PageEvent
from indexer.update_rows import copied_tables, moved_redirect, retitle


@dataclass(slots=True)
class Held:
    """A page as the index holds it now: its revision, where (base, delta, deleted, or pending in this update),
    its title."""

    rev_id: int | None
    stamp: str | None
    where: str  # 'base' | 'delta' | 'deleted' | 'pending'
    title: str = ""


def apply_event(run: Any, event: PageEvent, record: Any, path: Path) -> None:
    """One event into ``run`` (an ``indexer.update._Run``), counted in ``record``."""
    held = run.held.get(event.page_id)
    if held is not None and held.rev_id is not None and event.rev_id is not None and event.rev_id < held.rev_id:
        record.skipped_older += 1
        run.note(
            f"{path}: line {event.line}: {event.kind} of page {event.title!r} (id {event.page_id}) at revision "
            f"{event.rev_id} is older than revision {held.rev_id} the index holds; skipped"
        )
        return
    if event.kind == "delete":
        _delete(run, event, record)
    elif event.kind == "move":
        _move(run, event, record, path)
    elif event.kind == "undelete":
        _undelete(run, event, record)
    elif event.kind in ("create", "edit"):
        _stale(run, event, record, held)


def _delete(run: Any, event: PageEvent, record: Any) -> None:
    held = run.held.get(event.page_id)
    if held is not None and held.where == "deleted" and held.rev_id == event.rev_id:
        return  # applied before
    rev = event.rev_id if event.rev_id is not None else (held.rev_id if held is not None else None)
    run.pending.put_tombstone(event.page_id, (event.page_id, event.title, rev, event.dt, "delete"))
    run.held[event.page_id] = Held(rev, event.dt, "deleted", event.title)
    record.pages_deleted += 1


def _move(run: Any, event: PageEvent, record: Any, path: Path) -> None:
    held = run.held.get(event.page_id)
    if held is not None and held.where != "deleted" and held.title == event.title and held.rev_id == event.rev_id:
        return  # applied before
    if not run.copy(event, event.title):
        _stale(run, event, record, held)
        return
    old = event.prior_title
    if old and old != event.title:
        run.pending.redirects[old] = moved_redirect(old, event.title, event.page_id, event.namespace)
    record.pages_moved += 1


def _undelete(run: Any, event: PageEvent, record: Any) -> None:
    """The page's text as the index held it before the deletion, as a new revision (it outranks the tombstone)."""
    held = run.held.get(event.page_id)
    if held is not None and held.where != "deleted":
        return  # the index holds the page: nothing to restore
    run.pending.tombstones.pop(event.page_id, None)
    tables = copied_tables(run.store, event.page_id)
    if tables:
        fresh = retitle(tables, title=event.title, rev_id=event.rev_id, stamp=event.dt, base_url=run.base_url)
        run.pending.put_page(event.page_id, fresh)
        run.held[event.page_id] = Held(event.rev_id, event.dt, "pending", event.title)
        record.pages_undeleted += 1
    else:
        _stale(run, event, record, held)


def _stale(run: Any, event: PageEvent, record: Any, held: Any) -> None:
    if held is not None and held.rev_id is not None and event.rev_id is not None and held.rev_id >= event.rev_id:
        return  # the index already holds this revision (from a dump of the same update, say)
    run.pending.stale[event.page_id] = (event.page_id, event.title, event.rev_id, event.dt)
    record.pages_stale += 1
