"""Priority scheduling: chunked prefill with vLLM's `--scheduling-policy priority`."""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.policies.chunked import ChunkedPrefill


@dataclass(frozen=True)
class PriorityScheduling(ChunkedPrefill):
    """Chunked prefill (as ChunkedPrefill) with vLLM's `--scheduling-policy priority`: waiting
    requests are admitted by (priority level, arrival), a preempted one rejoins at its place, and
    a decode short of a block evicts the least urgent, latest admitted running sequence first.
    Levels come from `Workload.priority` (workload.PRIORITY_CLASSES). Not modelled: evicting a
    running low-priority sequence to admit a waiting high-priority one (only decodes evict)."""

    name = "priority"

    def enqueue(self, waiting, r, front: bool) -> None:
        """At its place by (priority level, arrival order), whether it arrives or was preempted."""
        key = (r.prio, r.i)
        pos = len(waiting)
        while pos > 0 and (waiting[pos - 1].prio, waiting[pos - 1].i) > key:
            pos -= 1
        waiting.insert(pos, r)

    def eviction_key(self, r):
        return (r.prio, r.admit_seq)
