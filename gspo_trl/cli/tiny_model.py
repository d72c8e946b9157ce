"""`gspo-trl tiny-model OUT_DIR [--moe]`: build the tiny CPU model and tokenizer (no hub needed).

`--moe` builds the tiny Qwen3-MoE instead (gspo_trl.model.tiny.moe: 8 experts, top-2), to try the
`moe:` section (routing replay, flip rates: docs/moe.md) with `--model.name_or_path OUT_DIR`."""

from __future__ import annotations

from collections.abc import Sequence

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.model.tiny.dense import TinyModelSpec, save_tiny_model
from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="gspo-trl tiny-model", description=__doc__)
    parser.add_argument("output_dir", help="directory to write config, weights and tokenizer to")
    parser.add_argument("--layers", type=int, help="layers (default: the spec's, 3 dense / 4 MoE)")
    parser.add_argument("--hidden-size", type=int, help=f"hidden size (default {TinyModelSpec.hidden_size})")
    parser.add_argument("--seed", type=int, default=TinyModelSpec.seed)
    parser.add_argument("--moe", action="store_true", help="a mixture of experts (Qwen3-MoE, top-2 of 8)")
    args = parser.parse_args(argv)
    spec_class = TinyMoeSpec if args.moe else TinyModelSpec
    shape = {"num_hidden_layers": args.layers, "hidden_size": args.hidden_size, "seed": args.seed}
    spec = spec_class(**{key: value for key, value in shape.items() if value is not None})
    if args.moe:
        path = save_tiny_moe(args.output_dir, spec)
        kind = f"tiny mixture of experts ({spec.num_experts} experts, top-{spec.num_experts_per_tok})"
    else:
        path, kind = save_tiny_model(args.output_dir, spec), "tiny model"
    print(f"{kind} and tokenizer written to {path}")
    return 0
