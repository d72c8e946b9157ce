"""GSPOTrainer: TRL's GRPOTrainer that hands each TRL event to an ordered list of probes.

GSPO itself is TRL configuration (`importance_sampling_level="sequence"`, `loss_type="grpo"`, beta 0,
eps 3e-4/4e-4, 4 updates per rollout batch). What GSPO-trl adds lives in probes (events:
probes/base.py; the built-in ones, in order, in `builtin_probes` and docs/probes.md), then the
probes given as `GSPOTrainer(..., probes=[...])`.

This module is the one place of the package that names TRL's and transformers' private Trainer
methods and state (tests/training/test_trl_private_methods.py checks it): each override quotes the
TRL line it relies on, so a TRL upgrade that moves one breaks here and nowhere else. Lines cited as
`grpo_trainer.py:N` are TRL's trainer (`class GRPOTrainer(_BaseTrainer):`,
trl/trainer/grpo_trainer.py:140), tests/test_upstream_pins.py checks each quote.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from trl import GRPOTrainer
from trl.generation.vllm_generation import VLLMGeneration

from gspo_trl.config.invariants import algorithm_of, check_ratio_level
from gspo_trl.config.sections import DiagnosticsConfig, EngineConfig, MoeConfig, SamplingConfig
from gspo_trl.model.engine_build import build_engine
from gspo_trl.model.loading.checkpoints import latest_checkpoint
from gspo_trl.training.api_defaults import gspo_trainer_arguments
from gspo_trl.training.probes.base import (
    CheckpointSave,
    Generation,
    LossCall,
    NoGradPass,
    PolicyForward,
    Probe,
    ProbeCallbacks,
)
from gspo_trl.training.probes.chain import ProbeChain
from gspo_trl.training.probes.console import ConsoleProbe
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from gspo_trl.training.probes.dynamic_sampling import DynamicSamplingProbe
from gspo_trl.training.probes.gspo_token import GspoTokenProbe
from gspo_trl.training.probes.non_finite import NonFiniteProbe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.training.probes.overlap import OverlapProbe
from gspo_trl.training.probes.packing import PackingProbe
from gspo_trl.training.probes.perf import PerfProbe
from gspo_trl.training.probes.resume_warnings import ResumeIntervalsProbe
from gspo_trl.training.probes.routing import RoutingProbe
from gspo_trl.training.probes.sampling_masks import SamplingMaskProbe
from gspo_trl.training.probes.staged_checkpoints import StagedCheckpointsProbe
from gspo_trl.training.probes.staleness import StalenessProbe
from gspo_trl.training.safety.interrupt import StopOnInterrupt, TrainingInterrupted


def _section(args: Any, name: str, kind: type) -> Any:
    """A GSPOConfig's section (`diagnostics`, `engine`, `moe`: a dataclass, checked when the config
    was built), or the defaults for a plain GRPOConfig."""
    section = getattr(args, name, None)
    return section if isinstance(section, kind) else kind()


def builtin_probes(args: Any) -> list[Probe]:
    """GSPO-trl's own probes for a run with these arguments, in event order."""
    diagnostics = _section(args, "diagnostics", DiagnosticsConfig)
    engine = _section(args, "engine", EngineConfig)
    probes: list[Probe] = [GspoTokenProbe()] if getattr(args, "gspo_token", False) else []
    # the order constraints are each probe's runs_after / runs_before, checked by ProbeChain
    stale: list[Probe] = [StalenessProbe(engine.staleness_settings())] if engine.max_staleness > 0 else []
    packing: list[Probe] = [PackingProbe()] if getattr(args, "packing", False) else []
    sampling = _section(args, "sampling", SamplingConfig)
    overlap: list[Probe] = (
        [OverlapProbe(engine.overlap_settings(), sampling)] if engine.overlap != "off" else []
    )
    return [
        DynamicSamplingProbe(sampling),
        *probes,
        DiagnosticsProbe(diagnostics),
        EngineLogprobsProbe(engine.old_logprobs_settings()),
        SamplingMaskProbe(engine.sampling_mask_settings()),
        CorrectionProbe(engine.correction_settings(), diagnostics),
        RoutingProbe(_section(args, "moe", MoeConfig), diagnostics),
        *stale,
        *packing,
        PerfProbe(),
        *overlap,
        StagedCheckpointsProbe(),
        NonFiniteProbe(),
        ResumeIntervalsProbe(),
    ]


@contextmanager
def _engine_build_wrapped() -> Iterator[None]:
    """TRL's engine build, the last line of VLLMGeneration's constructor (`self._init_vllm()`,
    trl/generation/vllm_generation.py:287; `def _init_vllm(self):`, :289), run inside the wrappers
    registered in gspo_trl.model.engine_build (the CPU shim's dtype, engine routing's `LLM`
    arguments), for the trainer's construction only (`self.vllm_generation = VLLMGeneration(`,
    grpo_trainer.py:1107; `from ..generation.vllm_generation import VLLMGeneration`, :71)."""
    original = VLLMGeneration._init_vllm

    def init_vllm(generation: Any) -> None:
        build_engine(generation, lambda: original(generation))

    VLLMGeneration._init_vllm = init_vllm
    try:
        yield
    finally:
        VLLMGeneration._init_vllm = original


class GSPOTrainer(GRPOTrainer):
    """GRPOTrainer plus GSPO diagnostics and GSPO-token; every argument is TRL's, and `probes`.

    Give it a `GSPOConfig` (gspo_trl.training.config): its `gspo_token`, `diagnostics`, `engine`
    and `moe` fields configure the built-in probes. Without one it trains GSPO's defaults; a plain
    `GRPOConfig` that is not GSPO is refused, and reward names resolve through the registry
    (gspo_trl.training.api_defaults). `probes` are added after the built-in ones
    (gspo_trl.training.probes.base, docs/probes.md); without a ConsoleProbe among them the
    trainer prints the console line and writes metrics.jsonl as `gspo-trl train` does.
    """

    def __init__(self, *args: Any, probes: Sequence[Probe] = (), **kwargs: Any) -> None:
        self._loss_call: LossCall | None = None
        kwargs = gspo_trainer_arguments(args, kwargs)  # GSPO when no config is given (api_defaults)
        console = [] if any(isinstance(p, ConsoleProbe) for p in probes) else [ConsoleProbe()]
        self.probes = ProbeChain([*builtin_probes(kwargs["args"]), *console, *probes])
        self._weight_sync_skipped = False
        with self.probes.trainer_init(), _engine_build_wrapped():  # routing_replay binds TRL's LLM
            super().__init__(**kwargs)
        self.gspo_token = bool(getattr(self.args, "gspo_token", False))
        self.probes.attach(self)
        self._callbacks_ahead = 0
        self.stop_on_interrupt = StopOnInterrupt()  # Ctrl-C: a checkpoint, as `gspo-trl train` does
        self.add_callback(self.stop_on_interrupt)  # ahead of the probes': the weight scan sees its save
        self._place_callbacks(self.probes.callbacks())
        if self.use_vllm:
            self._probe_weight_sync()
        # a GSPOConfig checked this when built; again here for one changed since (the same check)
        level = self.importance_sampling_level
        check_ratio_level(algorithm_of(level, self.gspo_token), level)

    def add_probe(self, probe: Probe) -> None:
        """Add a probe to a built trainer: last in the list, attached, its callbacks placed as if
        it had been given to __init__."""
        self.probes.append(probe)
        probe.attach(self)
        self._place_callbacks(probe.callbacks())

    def _place_callbacks(self, callbacks: ProbeCallbacks) -> None:
        """The probes' callbacks around transformers' own and the trackers' (which Trainer.__init__
        put in the list), each group in probe order: the one place the list is arranged."""
        ahead = callbacks.before_reporting
        self.callback_handler.callbacks[self._callbacks_ahead : self._callbacks_ahead] = ahead
        self._callbacks_ahead += len(ahead)
        for callback in callbacks.after_reporting:
            self.add_callback(callback)

    # --- TRL's metric buffer, for probes ----------------------------------------------------------
    def logged_values(self, key: str) -> list[float]:
        """The training values TRL buffered under `key` since the last log (`self._metrics[mode]
        [key].append(...)`, averaged and cleared by `log`, grpo_trainer.py:3302-3321)."""
        return list(self._metrics["train"].get(key, []))

    def record_metric(self, key: str, value: float) -> None:
        """Add a training value to TRL's buffer: averaged into the next log like TRL's own."""
        self._metrics["train"][key].append(value)

    # --- lifecycle ----------------------------------------------------------------------------------
    def train(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's train, told to the probes; `on_train_end` also when training raises (transformers
        calls its callbacks' on_train_end only on success): the console lets go of the alarm loggers.

        Ctrl-C or SIGTERM finishes the step, saves a checkpoint and raises TrainingInterrupted (a
        KeyboardInterrupt naming the checkpoint; gspo_trl.training.safety.interrupt), in a script
        as under `gspo-trl train`; `train(resume_from_checkpoint=True)` continues from it."""
        self.probes.train_begin(self)
        try:
            with self.stop_on_interrupt.installed():
                result = super().train(*args, **kwargs)
        finally:
            self.probes.train_end(self)
        if self.stop_on_interrupt.stopped_at_step is not None:
            saved = latest_checkpoint(self.args.output_dir)
            raise TrainingInterrupted(str(saved) if saved else None, self.stop_on_interrupt.stopped_at_step)
        return result

    def _probe_weight_sync(self) -> None:
        """TRL's `_generate` syncs through `self.vllm_generation.sync_weights()` when
        `self.state.global_step != self._last_loaded_step` (grpo_trainer.py:2202-2205, and :1769-1772
        in `_generate_single_turn`); the probes wrap (or skip) it. TRL then records the step as
        loaded (`self._last_loaded_step = self.state.global_step`, :1772) even when a probe skipped
        the sync, so the next rollout batch is told to ask again (`_generate_and_score_completions`):
        a training rollout at the step of an eval's skipped sync would otherwise never sync."""
        generation = self.vllm_generation

        def sync(*args: Any, **kwargs: Any) -> Any:
            synced = False

            def proceed() -> Any:
                nonlocal synced
                synced = True
                # The class's method, looked up at each call: a sync patched onto the class after
                # the trainer was built (gspo_trl.model.vllm_cpu.shim's shim, a user's) is the one called.
                return type(generation).sync_weights(generation, *args, **kwargs)

            result = self.probes.weight_sync(self, proceed)
            self._weight_sync_skipped = not synced
            return result

        generation.sync_weights = sync

    def sync_engine_weights(self) -> None:
        """Bring the colocated engine to the current weights outside a rollout (held-out scoring),
        by TRL's own step mark: `if self.use_vllm and self.state.global_step != self._last_loaded_step:`
        (grpo_trainer.py:2202), then `self._last_loaded_step = self.state.global_step` (:2205), so
        the next rollout does not sync again; also when the engine's weights sleep
        (`self._llm_weights_sleeping = True`, trl/generation/vllm_generation.py:752)."""
        engine = self.vllm_generation
        sleeping = getattr(engine, "_llm_weights_sleeping", False)  # colocate only; a server never sleeps
        if self.state.global_step != self._last_loaded_step or sleeping:
            engine.sync_weights()
            self._last_loaded_step = self.state.global_step

    def put_engine_to_sleep(self) -> None:
        """Leave a sleep-mode engine as TRL's generation does after each batch
        (`self.llm.sleep(level=2) self._llm_weights_sleeping = True`,
        trl/generation/vllm_generation.py:751-752): the next sync wakes it."""
        engine = self.vllm_generation
        engine.llm.sleep(level=2)
        engine._llm_weights_sleeping = True

    def use_trl_vllm_correction(self, on: bool) -> None:
        """Turn TRL's own vLLM importance-sampling correction on or off for the rest of the run.
        TRL reads the flag in its rollout (`if self.use_vllm and self.vllm_importance_sampling_correction:`,
        trl/trainer/grpo_trainer.py:2660) and in its loss (:3146)."""
        self.vllm_importance_sampling_correction = on

    @contextmanager
    def trl_loss_weight(self) -> Iterator[None]:
        """Let TRL's loss apply `inputs["importance_sampling_ratio"]` for this call: it multiplies
        `per_token_loss` by it only `if self.use_vllm and self.vllm_importance_sampling_correction and
        self.loss_type != "vespo"` (trl/trainer/grpo_trainer.py:3146-3147), the one read of that flag
        inside `_compute_loss`."""
        before = self.vllm_importance_sampling_correction
        self.vllm_importance_sampling_correction = True
        try:
            yield
        finally:
            self.vllm_importance_sampling_correction = before

    # --- the training prompts ahead of time (engine.overlap) -------------------------------------
    def generation_batches(self) -> Iterator[list[Any]] | None:
        """The training dataloader's items again, in the order the run will see them, epoch after
        epoch, from a second sampler built as TRL builds the run's
        (`batch_size=self._train_batch_size * self.args.steps_per_generation` (grpo_trainer.py:1275),
        `sampler_fn=self._get_train_sampler` (:1276), `shuffle=self.shuffle_dataset, seed=self.args.seed`
        (:1314-1315)): the same seed gives the same permutations, and a new `iter()` per epoch
        continues its generator as the run's does. With several processes, this process's share:
        accelerate's prepared loader hands out the sampler's batches round-robin (`if idx %
        self.num_processes == self.process_index: batch_to_yield = batch`, accelerate/data_loader.py:217-218).
        None for an iterable dataset (no sampler to replay)."""
        from itertools import islice

        from torch.utils.data import DataLoader, IterableDataset

        dataset = self.train_dataset
        if isinstance(dataset, IterableDataset):
            return None
        dataset = self._remove_unused_columns(dataset, description="Training")
        loader = DataLoader(
            dataset,
            batch_size=self._train_batch_size * self.args.steps_per_generation,
            sampler=self._get_train_sampler(dataset),
            collate_fn=self.data_collator,
            drop_last=self.args.dataloader_drop_last,
        )

        rank, ranks = self.accelerator.process_index, self.accelerator.num_processes

        def forever() -> Iterator[list[Any]]:
            while True:
                yield from islice(loader, rank, None, ranks)

        return forever()

    def tokenize_prompts(self, prompts: list[Any]) -> tuple[list[list[int]], Any, dict[str, Any]]:
        """TRL's own tokenization of a rollout batch's prompts, as `_generate` does it
        (`prompt_ids, images, multimodal_fields = self._tokenize_prompts(prompts)`, grpo_trainer.py:2221)."""
        import copy

        return self._tokenize_prompts(copy.deepcopy(prompts))

    # --- rollout ---------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """`generation_batch = self._generate_and_score_completions(generation_batch)`
        (grpo_trainer.py:1541, in `_prepare_inputs`, once per rollout batch)."""
        if self._weight_sync_skipped:  # TRL recorded a skipped sync as loaded: let it ask again
            self._last_loaded_step = -1  # as TRL starts: `self._last_loaded_step = -1` (grpo_trainer.py:1140)
            self._weight_sync_skipped = False
        return self.probes.rollout(self, inputs, super()._generate_and_score_completions)

    def _generate(self, prompts: list) -> tuple:
        """`(prompt_ids_list, completion_ids_list, tool_mask_list, completions,
        sampling_per_token_logps_list, ...) = self._generate(prompts)` (grpo_trainer.py:2426-2436)."""
        parent = super()._generate
        result = self.probes.generation(self, lambda: parent(prompts))
        generation = Generation(result[0], result[1], result[4], self.model.training, result)
        self.probes.generated(self, generation)
        return result

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """`rewards_per_func = self._calculate_rewards(inputs, prompts, completions,
        completion_ids_list)` (grpo_trainer.py:2753)."""
        parent = super()._calculate_rewards
        return self.probes.rewards(self, lambda: parent(*args, **kwargs))

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any):
        """Two kinds of call: the no-grad ones in `_generate_and_score_completions`
        (`old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ...)`,
        grpo_trainer.py:2646, and the reference model's at beta > 0, :2712), and the loss's policy
        pass (`per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(`,
        :3030, the first call inside `_compute_loss`). Positional order: (model, input_ids,
        attention_mask, logits_to_keep, ...), :1419-1424."""
        parent = self._logprob_forward()
        loss, self._loss_call = self._loss_call, None  # only the first call inside _compute_loss
        if loss is not None:
            return self._policy_forward(loss, parent(model, *args, **kwargs))
        call = NoGradPass(
            model=model,
            is_policy=model is self.model,
            attention_mask=kwargs.get("attention_mask", args[1] if len(args) > 1 else None),
            logits_to_keep=kwargs.get("logits_to_keep", args[2] if len(args) > 2 else None),
            training=self.model.training,
        )
        return self.probes.no_grad_pass(self, call, lambda: parent(model, *args, **kwargs))

    def _logprob_forward(self) -> Any:
        """TRL's forward, or with `packing: true` the same call on packed rows (probes/packing.py)."""
        packing = self.probes.find(PackingProbe)
        if packing is None:
            return super()._get_per_token_logps_and_entropies
        return lambda *args, **kwargs: packing.forward(self, *args, **kwargs)

    def _policy_forward(self, loss: LossCall, output: tuple) -> tuple:
        """The loss's forward, told to the probes before TRL reads `inputs["old_per_token_logps"]`
        (`old_per_token_logps = inputs.get("old_per_token_logps")`, grpo_trainer.py:3065)."""
        logps, entropies, _ = output
        inputs = loss.inputs
        mask = inputs["completion_mask"]  # TRL's own: `completion_mask * inputs["tool_mask"]`, :3027
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        forward = PolicyForward(logps.detach(), entropies, inputs.get("old_per_token_logps"), mask, loss)
        self.probes.policy_forward(self, forward)
        return output

    def plain_logprobs(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """Per-token log-probs (B, C) of a minibatch's completions by TRL's own forward, told to no
        probe: for a probe's extra measuring pass. The call TRL's loss makes (grpo_trainer.py:3024-3030)."""
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        width = inputs["completion_ids"].size(1)
        return self._logprob_forward()(model, input_ids, attention_mask, width)[0]

    # --- updates ---------------------------------------------------------------------------------
    def _minibatch_position(self) -> tuple[int, bool]:
        """(1-based minibatch index within the rollout batch, last micro-batch of it?), from TRL's
        micro-step counter (`self._step % generate_every`, grpo_trainer.py:1538-1539)."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        accumulation = self.args.gradient_accumulation_steps
        micro = self._step % generate_every
        return micro // accumulation + 1, micro % accumulation == accumulation - 1

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """`return self._compute_loss(model, inputs)` (grpo_trainer.py:2942, in `compute_loss`)."""
        minibatch, last = self._minibatch_position()
        loss = LossCall(dict(inputs), inputs, self.model.training, minibatch, last)
        self.probes.loss_inputs(self, loss)
        self._loss_call = loss
        try:
            value = super()._compute_loss(model, loss.inputs)
        finally:
            self._loss_call = None
        self.probes.loss(self, loss, value)
        return value

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """TRL's step (loss forward, then backward), grpo_trainer.py:1510."""
        try:
            return super().training_step(*args, **kwargs)
        finally:
            self.probes.training_step_end(self)

    # --- evaluation, checkpoints, logs -------------------------------------------------------------
    def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """`metrics = self._evaluate(trial, ignore_keys_for_eval)` (transformers/trainer.py:2196)."""
        parent = super()._evaluate
        return self.probes.evaluate(self, lambda: parent(*args, **kwargs))

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """`self._save_checkpoint(model, trial)` (transformers/trainer.py:2203), which writes under
        `run_dir = self._get_output_dir(trial=trial)` (:3227): a probe may point that elsewhere for
        the save (`CheckpointSave.write_dir`)."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        run_dir = self._get_output_dir(trial=trial)
        self.probes.save_state(self)  # into self.state, which the Trainer writes to trainer_state.json
        save = CheckpointSave(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}", run_dir)
        parent = super()._save_checkpoint

        def write() -> None:
            redirected = save.write_dir != run_dir
            if redirected:
                self._get_output_dir = lambda trial=None: save.write_dir  # every writer asks this
            try:
                parent(model, trial)
            finally:
                if redirected:
                    del self._get_output_dir

        self.probes.checkpoint_save(self, save, write)

    def _load_callback_state(self) -> None:
        """On resume, after the checkpoint's state is read (`self.state = TrainerState.load_from_json(`,
        transformers/trainer.py:1639), transformers restores its `ExportableState` callbacks:
        `self._load_callback_state()` (:1647; `def _load_callback_state(self) -> None:`, :3873);
        the probes' saved states (`Probe.state_key`) go back into them at the same point."""
        super()._load_callback_state()
        self.probes.load_state(self)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Each probe adds its metrics, then TRL's `log` (grpo_trainer.py:3302) averages its own."""
        logs.update(self.probes.log(self, logs))
        super().log(logs, start_time)
