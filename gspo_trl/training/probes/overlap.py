"""`engine.overlap: one_step` as a probe: the vLLM server generates rollout batch k+1 while the
trainer trains on batch k (docs/async.md "Overlap in server mode").

Batch k+1's prompts (a second copy of the run's sampler, `GSPOTrainer.generation_batches`: same
order, same seed, each rank its share) are gathered on the main thread and sent from rank 0's daemon
thread (TRL's request, no collective). At batch k+1 rank 0 broadcasts the result (or its one error
line), used only if every rank holds exactly its batch's token prompts (else generated now); rows
after the first batch are tagged ENGINE_VERSION / ENGINE_STALENESS = 1, pi_old is the trainer's. A
dynamic-sampling refill round is generated at once beside the request in flight (lag 0). A resumed
run starts with nothing in flight, Ctrl-C does not wait for the thread, a server that stops
answering is one VLLMServerLost line. Events: attach (wraps the engine's `generate`), around_rollout,
around_generation and around_weight_sync (collect the request in flight; the sync records the
version), on_rollout_end (tags), on_train_end, on_loss_inputs (row lags), on_log (`stale 1.0 (max 1)`,
perf/overlap_request_s).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import SamplingConfig
from gspo_trl.config.sections.engine_overlap import OverlapSettings
from gspo_trl.core.errors import RecipeError, VLLMServerLost
from gspo_trl.training.engine.vllm_server import (
    health_problem,
    process_share,
    server_base_url,
    server_generate,
)
from gspo_trl.training.probes.base import LossCall, Probe
from gspo_trl.training.probes.dynamic_sampling import DynamicSamplingProbe
from gspo_trl.training.probes.perf import PerfProbe
from gspo_trl.training.probes.staleness import (
    ENGINE_STALENESS,
    ENGINE_VERSION,
    RolloutVersion,
    rollout_metrics,
    stale_line_parts,
)
from gspo_trl.training.reporting.line_parts import LinePart
from gspo_trl.training.rollout_rows import ROW, Layout

logger = logging.getLogger(__name__)
T = TypeVar("T")

HEALTH_EVERY_S = 2.0
"""While waiting for the request in flight, how often the server's /health is asked."""


class Request:
    """One background generation: this process's token prompts, the engine version it was sent to,
    and (the main process only: it alone talks to the server) the thread asking and its outcome."""

    def __init__(self, key: tuple, version: int, call: Callable[[], tuple] | None) -> None:
        self.key, self.version = key, version
        self.result: tuple | None = None
        self.error: BaseException | None = None
        self.seconds: float | None = None
        """The request's wall time, once answered (perf/overlap_request_s)."""
        self.thread: threading.Thread | None = None
        if call is not None:
            self.thread = threading.Thread(target=self._run, args=(call,), name="gspo-overlap", daemon=True)
            self.thread.start()

    def _run(self, call: Callable[[], tuple]) -> None:
        start = time.perf_counter()
        try:
            self.result = call()
        except BaseException as error:  # reported by the trainer's thread when it waits
            self.error = error
        self.seconds = time.perf_counter() - start


def _key(prompt_ids: list[list[int]], num_generations: int) -> tuple:
    return tuple(tuple(ids) for ids in prompt_ids), num_generations


def _prompts(rows: list[Any]) -> list[Any] | None:
    try:
        return [row["prompt"] for row in rows]
    except (KeyError, TypeError):
        return None


class OverlapProbe(Probe):
    """Generates the next rollout batch on the server while this one trains; tags the lag."""

    rollout_layouts: ClassVar[dict[str, Layout]] = {ENGINE_VERSION: ROW, ENGINE_STALENESS: ROW}
    alarm_loggers = (__name__,)
    runs_after = (PerfProbe,)  # the wait inside around_generation is timed as generation

    def __init__(self, config: OverlapSettings, sampling: SamplingConfig) -> None:
        self.config, self.sampling = config, sampling
        self.batches: Iterator[list[Any]] | None = None
        self._cursor: list[Any] | None = None
        """The replayed sampler's current item (not yet matched), None: draw the next."""
        self.in_flight: Request | None = None
        """Sent, not yet collected; set on every process at once (the send is collective)."""
        self.ready: tuple[Request, tuple] | None = None
        """Collected: the request and the whole payload, on every process."""
        self.engine_step: int | None = None
        """The optimizer step whose weights the server holds (None: not synced by this process)."""
        self._rows: list[Any] | None = None
        self._used: tuple[int, int] | None = None
        """(version, staleness) of this rollout batch's generation."""
        self.history: list[RolloutVersion] = []
        """Every training rollout batch of this process (tests and scripts/bench_overlap.py read it)."""
        self._logged = 0
        self.dynamic: DynamicSamplingProbe | None = None
        self._refill = False
        """This generation is a refill round of dynamic sampling (not the rollout batch's first)."""
        self._row_lags: list[torch.Tensor] = []
        """sampling.dynamic: the trained rows' ENGINE_STALENESS since the last log."""
        self.dropped = 0
        """Background generations dropped because their prompts were not the batch's."""
        self._request_seconds: list[float] = []
        """The main process: the collected requests' wall times since the last log."""

    # --- setup ------------------------------------------------------------------------------------
    def attach(self, trainer: Any) -> None:
        self.dynamic = trainer.probes.find(DynamicSamplingProbe) if self.sampling.dynamic else None
        self.batches = trainer.generation_batches()
        if self.batches is None:
            raise RecipeError(
                "engine.overlap: one_step needs a map-style training dataset (its sampler replays the "
                "next rollout batch's prompts); a streamed dataset cannot: use engine.overlap: off"
            )
        self.server = server_base_url(trainer.args)
        self.accelerator = trainer.accelerator
        generation = trainer.vllm_generation
        generation.generate = lambda *a, **k: self.engine_generate(trainer, generation, *a, **k)

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`stale 1.0 (max 1)`, as engine.max_staleness shows its lag."""
        return stale_line_parts(logs)

    # --- events -----------------------------------------------------------------------------------
    def around_rollout(self, trainer: Any, prompts: list[Any], proceed: Callable[[list[Any]], dict]) -> dict:
        training = trainer.model.training
        self._refill = training and self.dynamic is not None and self.dynamic.refilling
        if not self._refill:  # a refill round's rows are not the sampler's: the next batch is found by these
            self._rows = prompts if training else None
        return proceed(prompts)

    def around_generation(self, trainer: Any, proceed: Callable[[], tuple]) -> tuple:
        if not self._refill:  # a refill round runs beside the request in flight, on the same weights
            self._collect(check_health=False)
        return proceed()

    def around_weight_sync(self, trainer: Any, proceed: Callable[[], T]) -> T:
        self._collect(check_health=True)  # never change the server's weights under a generation
        result = proceed()
        self.engine_step = trainer.state.global_step
        return result

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        if not trainer.model.training or self._used is None:
            return batch
        version, staleness = self._used
        if not self._refill:  # a refill round belongs to the rollout batch its first round began
            rollout = self.history[-1].rollout + 1 if self.history else 0
            step = trainer.state.global_step
            self.history.append(RolloutVersion(rollout, step, rollout - staleness, version))
        rows = batch["completion_ids"]
        for key, value in ((ENGINE_VERSION, version), (ENGINE_STALENESS, staleness)):
            batch[key] = torch.full((rows.shape[0],), value, dtype=torch.long, device=rows.device)
        self._used = None
        return batch

    def on_train_end(self, trainer: Any) -> None:
        self.in_flight = self.ready = None  # a daemon thread: an ended run does not wait for it

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if self.dynamic is not None and loss.training and ENGINE_STALENESS in loss.inputs:
            self._row_lags.append(loss.inputs[ENGINE_STALENESS].detach().cpu())

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        """The lag per rollout batch; with dynamic sampling, whose batches mix prefetched rows (lag 1)
        and refill rows (lag 0), mean and max are over the rows trained since the last log."""
        if not trainer.model.training:
            return {}
        new, self._logged = self.history[self._logged :], len(self.history)
        metrics = rollout_metrics(new)
        if self._row_lags:
            lags, self._row_lags = torch.cat(self._row_lags).double(), []
            metrics[names.STALENESS_MEAN] = lags.mean().item()
            metrics[names.STALENESS_MAX] = lags.max().item()
        if self._request_seconds:
            metrics[names.PERF_OVERLAP_REQUEST] = sum(self._request_seconds)
            self._request_seconds = []
        return metrics

    # --- the engine's generate ----------------------------------------------------------------------
    def engine_generate(
        self, trainer: Any, generation: Any, prompts: list, images: Any, num_generations: int, **kw: Any
    ) -> tuple:
        """TRL's `vllm_generation.generate`, answered by the request in flight when every process's
        prompts are the ones it holds (agreed by all: one process using it while another generates
        would leave the other alone in TRL's collectives)."""
        training = trainer.model.training
        if training and self._refill:  # not the batch's first round: generated now, nothing dropped or sent
            result = type(generation).generate(generation, prompts, images, num_generations, **kw)
            self._used = (self.engine_step if self.engine_step is not None else trainer.state.global_step, 0)
            return result
        self._collect(check_health=False)
        ready = self.ready
        use = False
        if ready is not None and training:  # the same on every process: ready and training are
            self.ready = None
            mine = images is None and ready[0].key == _key(prompts, num_generations)
            use = all(self._gathered(mine))
            if not use:
                self.dropped += 1
                logger.info("engine.overlap: the generation in flight held other prompts; generated now")
        if use:
            index = self.accelerator.process_index
            result = process_share(ready[1], index, len(prompts), num_generations)
            self._used = (ready[0].version, 1)
        else:
            result = type(generation).generate(generation, prompts, images, num_generations, **kw)
            self._used = (self.engine_step if self.engine_step is not None else trainer.state.global_step, 0)
        if training:
            self._send_next(trainer, generation, num_generations)
        return result

    def _gathered(self, value: Any) -> list[Any]:
        """`value` from every process, in rank order (the main thread's collective)."""
        if self.accelerator.num_processes == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])

    def _send_next(self, trainer: Any, generation: Any, num_generations: int) -> None:
        """Every process reads its own next prompts; gathered, the main process alone sends them
        all (its thread makes the HTTP request, no collective); nobody sends unless all can."""
        rows = self._next_rows(trainer)
        prompts = _prompts(rows) if rows is not None else None
        prompt_ids = None
        if prompts is not None:
            prompt_ids, images, multimodal = trainer.tokenize_prompts(prompts)
            if images is not None or multimodal:
                prompt_ids = None  # images go with their features: generated when their batch comes
        everyone = self._gathered(prompt_ids)
        if any(ids is None for ids in everyone):
            return
        version = self.engine_step if self.engine_step is not None else trainer.state.global_step
        call = None
        if self.accelerator.is_main_process:
            all_prompt_ids = [ids for share in everyone for ids in share]

            def call() -> tuple:
                return server_generate(generation, all_prompt_ids, num_generations)

        self.in_flight = Request(_key(prompt_ids, num_generations), version, call)

    def _next_rows(self, trainer: Any) -> list[Any] | None:
        """The replayed sampler's item one rollout batch after this one's rows, or None when the
        rows are not found within the run's length (the next batch is then generated as today)."""
        current = _prompts(self._rows or [])
        if current is None:
            return None
        args = trainer.args
        generate_every = args.steps_per_generation * trainer.num_iterations
        limit = max(1, trainer.state.max_steps) * args.gradient_accumulation_steps + 2 * generate_every
        for _ in range(limit):
            item = self._cursor if self._cursor is not None else next(self.batches)
            self._cursor = None
            if _prompts(item) == current:
                break
        else:
            logger.warning(
                "engine.overlap: this rollout batch's prompts are not in the replayed sampler; "
                "the next batch is generated without overlap"
            )
            self.batches = trainer.generation_batches()
            return None
        for _ in range(generate_every - 1):
            next(self.batches)
        self._cursor = next(self.batches)
        return self._cursor

    # --- waiting -------------------------------------------------------------------------------------
    def _collect(self, check_health: bool) -> None:
        """On every process at once: the main process waits for the request in flight (and asks the
        server's /health before a sync), then broadcasts the payload, or the one line saying why
        not, so that every process raises the same VLLMServerLost instead of waiting for the other."""
        request, self.in_flight = self.in_flight, None
        if request is None and not check_health:
            return
        outcome: tuple[str, Any] = ("ok", None)
        if self.accelerator.is_main_process:
            try:
                if request is not None:
                    self._wait_for(request)
                    self._request_seconds.append(request.seconds or 0.0)
                if check_health and (problem := health_problem(self.server, timeout_s=5.0)) is not None:
                    raise self._lost(problem, "before a weight sync")
                outcome = ("ok", request.result if request is not None else None)
            except VLLMServerLost as error:
                outcome = ("lost", str(error))
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            shared = [outcome]
            broadcast_object_list(shared, from_process=0)
            outcome = shared[0]
        kind, value = outcome
        if kind == "lost":
            raise VLLMServerLost(value)
        if request is not None:
            self.ready = (request, value)

    def _wait_for(self, request: Request) -> None:
        """Until the main process's request is done; its error, or a server gone from /health, is one line."""
        last_check = time.monotonic()
        while request.thread is not None and request.thread.is_alive():
            request.thread.join(timeout=0.2)
            if request.thread.is_alive() and time.monotonic() - last_check >= HEALTH_EVERY_S:
                last_check = time.monotonic()
                problem = health_problem(self.server, timeout_s=5.0)
                if problem is not None:
                    raise self._lost(problem, "while it generated the next rollout batch")
        if request.error is not None:
            error = request.error
            raise self._lost(f"{type(error).__name__}: {str(error)[:200]}", "during a generation")

    def _lost(self, problem: str, when: str) -> VLLMServerLost:
        problem = " ".join(problem.split())
        return VLLMServerLost(
            f"the vLLM server at {self.server} stopped answering {when} (engine.overlap: one_step): "
            f"{problem}; "
            "the checkpoints saved so far are kept: restart the server, then rerun with --resume"
        )
