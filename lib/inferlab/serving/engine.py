"""One model instance (a replica, tp devices) stepping through requests, iteration by iteration.

Discrete-event, one event per engine step: the policy picks the step's work (serving.policies; the
replica asks it through its methods, never its type or flags), the step time comes from a
StepTimeModel (steptime.py: `step_time_s(StepShape, t_s)`, told the step's work and its start), and
the clock jumps by it. Per-token work is never done in Python: a decoding sequence takes part in every decode step from the one after its
prefill until it finishes or is preempted, so its token times are a slice of the decode steps'
end times, and its finish and its next KV block are scheduled by decode-step index.

Token accounting (vLLM's): a prefill of n tokens writes n keys and samples one token; each decode
step feeds the last sampled token (one key written) and samples the next. A request of S prompt
and N output tokens holds S + j tokens in its cache after decode step j, at most S + N - 1.
Preemption by recompute frees all of a sequence's blocks; it re-enters the front of the queue
and later prefills its prompt plus the g tokens it has generated (S + g), which samples token g+1.

Prefix caching (vLLM's automatic prefix caching, on with `prefix_caching=True`): a request whose
prompt starts with a shared prefix (`Workload.prefix_id`) of P tokens can reuse the KV blocks of
its first floor(P / block) full blocks (c tokens). The first request computes them in its own
prefill; once its prefill has passed them they become a cache entry, reference-counted by the
requests that use them. A later request admitted while the entry exists takes a reference,
allocates blocks only for its other tokens, and starts its prefill at token c: it feeds the
S - c uncached tokens while their attention still reads all c + (S - c) keys (the step time's
pairs and keys count the cached ones). Entries whose count falls to zero stay cached (their
blocks count as used) and are evicted, least recently used first, only when admission or a
decode block finds the free pool short; an entry in use is never evicted (pinned while used).
A request admitted before the entry exists computes its own copy (as a real engine, which can
only reuse blocks already computed); when its prefill passes the prefix, it drops the copy and
shares the entry. Static batching does not cache.
"""
from __future__ import annotations

from collections import defaultdict, deque

from inferlab.serving.kv import blocks_for
from inferlab.serving.steptime import StepShape

INF = float("inf")


class Req:
    """Mutable state of one request inside the engine."""

    __slots__ = ("i", "arrival", "prompt", "output", "generated", "target", "done", "blocks",
                 "epoch", "first_sched", "first_token", "finish", "parts", "preemptions",
                 "admit_seq", "d_start", "c0", "end_d", "replica", "rejected", "pid", "pblocks",
                 "pref", "hit", "prio", "kv_ready")

    def __init__(self, i, arrival, prompt, output, pid=-1, prefix=0, block_tokens=16, prio=1):
        self.i, self.arrival, self.prompt, self.output = i, arrival, prompt, output
        self.prio = prio        # priority level (workload.PRIORITY_CLASSES index; 0 most urgent)
        self.kv_ready = False   # its prompt's KV cache arrives computed (a disaggregated decode pool)
        self.generated = 0
        self.target = prompt  # tokens the next prefill must process
        self.done = 0         # of those, processed so far (chunked prefill)
        self.blocks = 0
        self.epoch = 0        # bumped on preemption: stale scheduled events are skipped
        self.first_sched = self.first_token = self.finish = None
        self.parts = []       # token times: a float (a prefill's token) or (first decode step, count)
        self.preemptions = 0
        self.admit_seq = 0
        self.d_start = self.c0 = self.end_d = 0
        self.replica = 0
        self.rejected = False
        self.pid = pid                          # shared prefix id, -1: none
        self.pblocks = prefix // block_tokens if pid >= 0 else 0  # its full blocks: what can be cached
        self.pref = False                       # holds a reference to its prefix's cache entry
        self.hit = 0                            # prompt tokens served from the cache at the last admission


class Replica:
    """The scheduler and KV block pool of one model instance."""

    def __init__(self, step_time, policy, kv_blocks: int, block_tokens: int,
                 watermark_blocks: int = 0, index: int = 0, prefix_caching: bool = False):
        self.step_time, self.policy = step_time, policy
        self.total_blocks, self.bs = int(kv_blocks), int(block_tokens)
        self.watermark = int(watermark_blocks)
        self.index = index
        self.clock = 0.0
        self.waiting: deque = deque()
        self.arrived: deque = deque()  # requests whose KV cache arrived from a prefill pool, not yet admitted
        self.prefilling: list = []
        self.decoding: dict = {}
        self.n_dec = 0
        self.sum_cache = 0     # tokens in the caches of the decoding sequences
        self.d = 0             # index of the next decode step
        self.dec_end: list = []  # end time of every decode step
        self.finish_at = defaultdict(list)
        self.block_at = defaultdict(list)
        self.free = self.total_blocks
        self.admitted = 0
        self.static_batch = None   # a batch formed whole (StepPlan.form_batch), decoding together
        self.static_end_d = -1
        self.arrivals_over = False  # run_until(final=True): no request will arrive any more
        self.requests: list = []
        # prefix cache: id -> [blocks, references, last use]; None when caching is off
        self.pcache = {} if prefix_caching else None
        self.uses = 0
        # time series, one entry per step
        self.log_start, self.log_dt, self.log_batch, self.log_tokens, self.log_kv = [], [], [], [], []

    # -- bookkeeping -----------------------------------------------------------------------------
    def busy(self) -> bool:
        return bool(self.prefilling or self.n_dec or self.static_batch)

    def outstanding(self) -> int:
        """Requests accepted and not finished (the least-loaded router's measure)."""
        return len(self.waiting) + len(self.prefilling) + len(self.decoding) + len(self.static_batch or ())

    def add(self, r: Req) -> None:
        r.replica = self.index
        self.requests.append(r)
        if not self.policy.fits_alone(r.prompt, r.output, self.total_blocks, self.watermark, self.bs):
            r.rejected = True  # can never be served, even alone
            return
        if not self.busy() and self.clock < r.arrival:
            self.clock = r.arrival
        if r.kv_ready:
            self.arrived.append(r)
            return
        self._enqueue(r, front=False)

    def _enqueue(self, r: Req, front: bool) -> None:
        """Into the waiting queue where the policy puts it (an arrival, or a preempted request: front)."""
        self.policy.enqueue(self.waiting, r, front)

    def _finish(self, r: Req, t: float) -> None:
        r.finish = t
        self.free += r.blocks
        r.blocks = 0
        if r.pref:
            self._unref(r)

    # -- prefix cache ------------------------------------------------------------------------------
    def _unref(self, r: Req) -> None:
        self.pcache[r.pid][1] -= 1
        r.pref = False

    def _ref(self, r: Req, entry) -> None:
        entry[1] += 1
        self.uses += 1
        entry[2] = self.uses
        r.pref = True

    def _evict(self, blocks: int) -> None:
        """Free at least `blocks` blocks by dropping unused cache entries, least recently used first
        (as many as there are)."""
        idle = sorted((e[2], k) for k, e in self.pcache.items() if e[1] == 0)
        for _, k in idle:
            if blocks <= 0:
                break
            n = self.pcache.pop(k)[0]
            self.free += n
            blocks -= n

    def _idle_cached(self) -> int:
        return sum(e[0] for e in self.pcache.values() if e[1] == 0) if self.pcache else 0

    def _register(self, r: Req) -> None:
        """r's prefill has passed its prefix's full blocks: they become (or join) the cache entry."""
        entry = self.pcache.get(r.pid)
        r.blocks -= r.pblocks
        if entry is None:
            self.pcache[r.pid] = entry = [r.pblocks, 0, 0]
        else:
            self.free += r.pblocks  # an entry appeared meanwhile: drop this copy, share that one
        self._ref(r, entry)

    def _log(self, t0, dt, batch, tokens):
        self.log_start.append(t0)
        self.log_dt.append(dt)
        self.log_batch.append(batch)
        self.log_tokens.append(tokens)
        self.log_kv.append(self.total_blocks - self.free)

    # -- admission, blocks, preemption --------------------------------------------------------------
    def _admit(self, t: float, token_cap=None, max_seqs=None, first_chunk=None, whole_prompts=False) -> int:
        """Admit waiting requests in queue order while blocks (beyond the watermark), the sequence
        cap and the prompt-token cap allow; return the prompt tokens admitted. A request gets the
        blocks of the tokens its policy names (`kv_tokens_at_admission`), less those cached; with
        `whole_prompts` a prompt that does not fit all of first_chunk waits (never split)."""
        admitted_tokens = 0
        while self.waiting and len(self.prefilling) + self.n_dec < max_seqs:
            r = self.waiting[0]
            cached = 0
            if self.pcache is not None and r.pblocks:
                entry = self.pcache.get(r.pid)
                if entry is not None:
                    cached = r.pblocks * self.bs
            need = blocks_for(self.policy.kv_tokens_at_admission(r) - cached, self.bs)
            left = r.target - cached
            take = left if first_chunk is None else min(first_chunk - admitted_tokens, left)
            if whole_prompts and take < left:
                break  # chunked prefill off: the prompt waits until all of it fits
            if token_cap is not None and admitted_tokens + take > token_cap and admitted_tokens > 0:
                break
            if take <= 0:
                break
            if self.free - need < self.watermark:
                if self.pcache and self.free - need + self._idle_cached() - (
                        entry[0] if cached and entry[1] == 0 else 0) >= self.watermark:
                    if cached:
                        entry[1] += 1  # not evictable while this request takes it
                    self._evict(need + self.watermark - self.free)
                    if cached:
                        entry[1] -= 1
                else:
                    break
            self.waiting.popleft()
            self.free -= need
            r.blocks = need
            r.done = cached
            r.hit = cached
            if cached:
                self._ref(r, entry)
            self.admitted += 1
            r.admit_seq = self.admitted
            if r.first_sched is None:
                r.first_sched = t
            self.prefilling.append(r)
            admitted_tokens += take
        return admitted_tokens

    def _admit_arrived(self, t: float) -> None:
        """Requests whose KV cache arrived (prompt computed elsewhere, first token sampled there)
        join the decoding sequences in arrival order while blocks and the sequence cap allow;
        their first token is delivered now (serving.disaggregation)."""
        cap = self.policy.max_num_seqs
        while self.arrived and len(self.prefilling) + self.n_dec < cap:
            r = self.arrived[0]
            need = blocks_for(self.policy.kv_tokens_at_admission(r), self.bs)
            if self.free < need + self.watermark:
                break
            self.arrived.popleft()
            self.free -= need
            r.blocks = need
            self.admitted += 1
            r.admit_seq = self.admitted
            r.first_sched = t
            r.target = r.done = r.prompt
            r.generated = 1
            r.first_token = t
            r.parts.append(t)
            if r.output == 1:
                self._finish(r, t)
            else:
                self._join_decoding(r)

    def _preempt(self, v: Req) -> None:
        if v.i in self.decoding:
            k = self.d - v.d_start
            if k > 0:
                v.parts.append((v.d_start, k))
                v.generated += k
            self.sum_cache -= v.c0 + k
            del self.decoding[v.i]
            self.n_dec -= 1
        else:
            self.prefilling.remove(v)
        self.free += v.blocks
        v.blocks = 0
        if v.pref:
            self._unref(v)
        v.epoch += 1
        v.preemptions += 1
        v.target = v.prompt + v.generated
        v.done = 0
        self._enqueue(v, front=True)

    def _reserve_decode_blocks(self) -> bool:
        """Give every decoding sequence that crosses a block boundary at this step a new block,
        evicting the latest admitted sequences while the pool is short; True if any was evicted."""
        d = self.d
        needs = [r for r, ep in self.block_at.pop(d, ()) if r.epoch == ep]
        preempted = False
        if self.pcache and self.free < len(needs):
            self._evict(len(needs) - self.free)
        while self.free < len(needs):
            preempted = True
            victim = max((*self.decoding.values(), *self.prefilling),
                         key=self.policy.eviction_key)
            self._preempt(victim)
            if victim in needs:
                needs.remove(victim)
        for r in needs:
            r.blocks += 1
            self.free -= 1
            nxt = d + self.bs
            if nxt <= r.end_d:
                self.block_at[nxt].append((r, r.epoch))
        return preempted

    def _join_decoding(self, r: Req) -> None:
        r.d_start = self.d
        r.c0 = r.target
        r.end_d = self.d + (r.output - r.generated) - 1
        self.finish_at[r.end_d].append((r, r.epoch))
        k = self.d + (r.blocks + (r.pblocks if r.pref else 0)) * self.bs - r.c0
        if k <= r.end_d:
            self.block_at[k].append((r, r.epoch))
        self.decoding[r.i] = r
        self.n_dec += 1
        self.sum_cache += r.c0

    # -- the state a policy plans on (its plan_step) ------------------------------------------------
    @property
    def n_decoding(self) -> int:
        return self.n_dec

    def left(self, r: Req) -> int:
        """Prompt tokens r still has to feed in its prefill."""
        return r.target - r.done

    def reserve_decode(self) -> bool:
        return self._reserve_decode_blocks()

    def admit(self, token_cap=None, max_seqs=None, first_chunk=None, whole_prompts=False) -> int:
        return self._admit(self.clock, token_cap, max_seqs, first_chunk, whole_prompts)

    # -- one step ---------------------------------------------------------------------------------------
    def _step(self, t_next: float) -> bool:
        """The step the policy plans: a whole batch formed (if it starts before t_next), the formed
        batch's decode, or iteration-level work. False when there is nothing to do before t_next."""
        t0 = self.clock
        if self.arrived:
            self._admit_arrived(t0)
        plan = self.policy.plan_step(self)
        if plan.form_batch:
            if plan.start_s >= t_next:
                return False
            self.clock = plan.start_s
            self._static_form(plan.form_batch)
            return True
        if self.static_batch:
            self._static_decode()
            return True
        chunks, do_decode = list(plan.chunks), plan.decode
        if not chunks and not do_decode:
            return False

        n_dec = self.n_dec if do_decode else 0
        logits = n_dec + sum(1 for r, q in chunks if r.done + q == r.target)
        step = StepShape(n_dec, float(self.sum_cache + n_dec) if do_decode else 0.0,
                         tuple((q, r.done) for r, q in chunks), logits)
        tokens = n_dec + sum(q for _, q in chunks)
        dt = self.step_time.step_time_s(step, t0)
        t1 = t0 + dt
        self._log(t0, dt, n_dec + len(chunks), tokens)

        if do_decode:
            d = self.d
            self.dec_end.append(t1)
            self.sum_cache += n_dec
            for r, ep in self.finish_at.pop(d, ()):
                if r.epoch != ep:
                    continue
                k = d - r.d_start + 1
                r.parts.append((r.d_start, k))
                r.generated += k
                self.sum_cache -= r.c0 + k
                del self.decoding[r.i]
                self.n_dec -= 1
                self._finish(r, t1)
            self.d += 1
        finished_prefill = False
        pc = self.pcache is not None
        for r, q in chunks:
            r.done += q
            if pc and r.pblocks and not r.pref and r.done >= r.pblocks * self.bs:
                self._register(r)
            if r.done == r.target:
                finished_prefill = True
                r.generated += 1
                r.parts.append(t1)
                if r.first_token is None:
                    r.first_token = t1
                if r.generated >= r.output:
                    self._finish(r, t1)
                else:
                    self._join_decoding(r)
        if finished_prefill:
            self.prefilling = [r for r in self.prefilling if r.done < r.target]
        self.clock = t1
        return True

    # -- whole batches (static batching) -------------------------------------------------------------
    def _static_form(self, batch_size: int) -> None:
        """Up to batch_size waiting requests, each reserving its whole sequence's blocks, prefilled
        together padded to the longest prompt."""
        t0 = self.clock
        batch = []
        while self.waiting and len(batch) < batch_size:
            r = self.waiting[0]
            need = blocks_for(r.prompt + r.output, self.bs)  # reserved for the whole generation
            if need > self.free:
                break
            self.waiting.popleft()
            self.free -= need
            r.blocks = need
            batch.append(r)
        n = len(batch)
        s = max(r.prompt for r in batch)  # prompts padded to the longest
        dt = self.step_time.step_time_s(StepShape(0, 0.0, ((s, 0),) * n, n), t0)
        t1 = t0 + dt
        self._log(t0, dt, n, n * s)
        self.clock = t1
        longest = max(r.output for r in batch)
        for r in batch:
            r.first_sched, r.first_token, r.generated = t0, t1, 1
            r.parts.append(t1)
            r.d_start, r.c0 = self.d, s
            r.end_d = self.d + r.output - 2
            if r.output == 1:
                r.finish = t1
            else:
                self.finish_at[r.end_d].append((r, r.epoch))
        if longest == 1:
            self._static_release(batch)
            return
        self.static_batch = batch
        self.static_end_d = self.d + longest - 2
        self.n_dec = n  # finished sequences stay in the batch as padding
        self.sum_cache = n * s

    def _static_release(self, batch) -> None:
        for r in batch:
            self.free += r.blocks
            r.blocks = 0
        self.static_batch = None
        self.n_dec = 0
        self.sum_cache = 0

    def _static_decode(self) -> None:
        t0, n = self.clock, self.n_dec
        ctx = float(self.sum_cache + n)
        dt = self.step_time.step_time_s(StepShape(n, ctx, (), n), t0)
        t1 = t0 + dt
        self._log(t0, dt, n, n)
        d = self.d
        self.dec_end.append(t1)
        self.sum_cache += n
        for r, ep in self.finish_at.pop(d, ()):
            k = d - r.d_start + 1
            r.parts.append((r.d_start, k))
            r.generated += k
            r.finish = t1
        self.d += 1
        self.clock = t1
        if d == self.static_end_d:
            self._static_release(self.static_batch)

    # -- driving ------------------------------------------------------------------------------------
    def run_until(self, t: float, final: bool = False) -> None:
        """Run every step that starts before time t (all remaining work when final)."""
        self.arrivals_over = final
        while self.clock < t:
            if not (self.waiting or self.arrived or self.busy()):
                break
            if not self._step(t):
                break
