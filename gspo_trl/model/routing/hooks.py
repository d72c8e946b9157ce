"""Forward hooks on every router of a model: record the experts each token went to, replay a
recorded routing, and compare the router's own choice with a reference.

A *routing* is one integer tensor (B, layers, L, k): per sequence, router (in module order) and
position as the model sees it (padding included), the k experts. The hooks work per *pass*, one
or more forwards of consecutive rows of one batch: an input-embedding pre-hook sees each chunk's
rows, and each router's hook reads or writes that chunk's slice.
- record: keep every router's indices (the pi_old forward, whose routing R2 replays).
- reference: per (row, layer, position) a *flip* is a top-k set unlike the reference's.
- replay: the reference's indices instead of the router's, with gate weights recomputed from the
  current logits at those experts (the router keeps learning).
A pass with gradients must be one forward: gradient checkpointing reruns each layer during
backward, after the pass's last chunk (docs/moe.md quotes the TRL line that makes it one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gspo_trl.model.routing.families import RouterSite, find_routers


def routing_dtype(num_experts: int) -> torch.dtype:
    """The smallest integer type that holds every expert index: a routing is kept for the whole
    rollout batch (a 30B-A3B response of 8k tokens: 48 layers x 8 experts x 8k = 3 MB in uint8)."""
    return torch.uint8 if num_experts <= 256 else torch.int16


def top_k_sets_differ(indices: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """(N,) True where the two (N, k) index tensors choose a different set of experts."""
    mine = indices.sort(dim=-1).values
    theirs = reference.to(indices.dtype).sort(dim=-1).values
    return (mine != theirs).any(dim=-1)


@dataclass
class RoutingPass:
    """One pass's settings and, after it, what it recorded and found."""

    record: bool = False
    reference: torch.Tensor | None = None
    replay: bool = False
    recorded: list[list[torch.Tensor]] = field(default_factory=list)
    """Per router, per chunk: (rows, L, k) indices."""
    flips: torch.Tensor | None = None
    """(B, layers, L) bool: the router's own set differs from the reference's."""
    rows: slice = field(default_factory=lambda: slice(0, 0))
    seq_len: int = 0
    layout: Any = None
    """With packing (gspo_trl.training.packed_rows.PackedLayout): where each row's tokens sit in
    the packed forward the routers see; the routing is still kept as (B, layers, L, k) rows."""

    def routing(self) -> torch.Tensor | None:
        """The recorded routing, (B, layers, L, k); None when nothing was recorded."""
        if not self.recorded or not self.recorded[0]:
            return None
        return torch.stack([torch.cat(chunks) for chunks in self.recorded], dim=1)


class RoutingHooks:
    """Hooks on `model`'s routers (gspo_trl.model.routing.families), idle outside a pass."""

    def __init__(self, model: nn.Module, sites: list[RouterSite] | None = None) -> None:
        self.sites = find_routers(model) if sites is None else sites
        if not self.sites:
            raise ValueError(f"{type(model).__name__} has no router this package knows")
        router = self.sites[0].module
        self.top_k = int(router.top_k)
        self.num_experts = int(router.num_experts)
        self.dtype = routing_dtype(self.num_experts)
        self._pass: RoutingPass | None = None
        self._handles = [model.get_input_embeddings().register_forward_pre_hook(self._on_input)]
        self._handles += [site.module.register_forward_hook(self._router_hook(site)) for site in self.sites]

    @property
    def num_layers(self) -> int:
        return len(self.sites)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # --- passes ------------------------------------------------------------------------------
    def begin(
        self, record: bool = False, reference: torch.Tensor | None = None, replay: bool = False
    ) -> None:
        """Start a pass: record, compare with `reference` (B, layers, L, k), and replay it."""
        if replay and reference is None:
            raise ValueError("routing replay needs the routing to replay")
        if reference is not None and tuple(reference.shape[1:2] + reference.shape[3:]) != (
            self.num_layers,
            self.top_k,
        ):
            raise ValueError(
                f"a routing of shape {tuple(reference.shape)} does not fit this model's "
                f"{self.num_layers} routers of top-{self.top_k} (B, layers, L, k)"
            )
        self._pass = RoutingPass(record=record, reference=reference, replay=replay)
        if record:
            self._pass.recorded = [[] for _ in self.sites]
        if reference is not None:
            batch, layers, length, _ = reference.shape
            self._pass.flips = torch.zeros(batch, layers, length, dtype=torch.bool, device=reference.device)

    def end(self) -> RoutingPass | None:
        """End the pass; returns it (its `routing()` and `flips`), None when none was running."""
        finished, self._pass = self._pass, None
        return finished

    @property
    def active(self) -> RoutingPass | None:
        return self._pass

    def packed(self, layout: Any) -> None:
        """The next forward of this pass runs packed rows (`layout`, a PackedLayout): the hooks map
        its tokens to and from their (row, position) in the padded rows. Kept until the pass ends,
        so a backward's recomputed forward (gradient checkpointing) is mapped the same way."""
        if self._pass is not None:
            self._pass.layout = layout

    # --- hooks -------------------------------------------------------------------------------
    def _on_input(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        now = self._pass
        if now is None or not args:
            return
        rows, length = args[0].shape[:2]
        layout = now.layout
        if layout is not None:
            if (rows, length) != layout.shape:
                raise RuntimeError(
                    f"routing: a packed forward of {rows} x {length} tokens does not match its layout "
                    f"{layout.shape}"
                )
            rows, length = layout.rows, layout.width
        start = now.rows.stop
        if start and torch.is_grad_enabled():
            raise RuntimeError(
                "routing replay: a forward with gradients ran as a second chunk of one pass; gradient "
                "checkpointing would replay the wrong rows (one forward per update is what TRL 1.16 runs)"
            )
        reference = now.reference
        if reference is not None and (start + rows > reference.shape[0] or length != reference.shape[2]):
            raise RuntimeError(
                f"routing replay: a forward of {rows} x {length} tokens at row {start} does not fit the "
                f"recorded routing {tuple(reference.shape)} (B, layers, L, k): the batch was reordered "
                "or re-padded between the recording and this pass"
            )
        now.rows, now.seq_len = slice(start, start + rows), length

    def _router_hook(self, site: RouterSite):
        def hook(module: nn.Module, args: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> Any:
            now = self._pass
            if now is None:
                return None
            logits, _, indices = output
            rows = now.rows.stop - now.rows.start
            layout = now.layout
            tokens = rows * now.seq_len if layout is None else layout.shape[0] * layout.shape[1]
            if indices.shape[0] != tokens:
                raise RuntimeError(
                    f"routing: router {site.path} saw {indices.shape[0]} tokens, expected {tokens} "
                    "(did the model run without its input embedding?)"
                )
            if now.record:
                recorded = indices.detach() if layout is None else _to_rows(indices.detach(), layout, rows)
                now.recorded[site.layer].append(recorded.reshape(rows, now.seq_len, -1).to(self.dtype))
            if now.reference is None:
                return None
            reference = now.reference[now.rows, site.layer].reshape(rows * now.seq_len, -1).long()
            if layout is None:
                now.flips[now.rows, site.layer] = top_k_sets_differ(indices.detach(), reference).view(
                    rows, now.seq_len
                )
            else:  # real tokens compared at their rows; the packed filler follows its own router
                flips = torch.zeros(rows * now.seq_len, dtype=torch.bool, device=indices.device)
                mine, theirs = indices.detach()[layout.packed_index], reference[layout.padded_index]
                flips[layout.padded_index] = top_k_sets_differ(mine, theirs)
                now.flips[now.rows, site.layer] = flips.view(rows, now.seq_len)
                packed_reference = indices.detach().long().clone()
                packed_reference[layout.packed_index] = theirs
                reference = packed_reference
            if not now.replay:
                return None
            return logits, site.family.scores_at(module, logits, reference), reference

        return hook


def _to_rows(indices: torch.Tensor, layout: Any, rows: int) -> torch.Tensor:
    """A packed forward's (N x W, k) expert indices at their rows' (rows x L, k) positions (0 at
    padding, which no update reads: flips count response tokens only)."""
    out = indices.new_zeros((rows * layout.width, indices.shape[-1]))
    out[layout.padded_index] = indices[layout.packed_index]
    return out
