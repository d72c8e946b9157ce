"""`gspo-trl tiny-model OUT_DIR`: build the tiny CPU model and tokenizer (no hub needed)."""

from __future__ import annotations

from collections.abc import Sequence

from gspo_trl.model.tiny import TinyModelSpec, save_tiny_model
from gspo_trl.rewards.suggest import ArgumentParser


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="gspo-trl tiny-model", description=__doc__)
    parser.add_argument("output_dir", help="directory to write config, weights and tokenizer to")
    parser.add_argument("--layers", type=int, default=TinyModelSpec.num_hidden_layers)
    parser.add_argument("--hidden-size", type=int, default=TinyModelSpec.hidden_size)
    parser.add_argument("--seed", type=int, default=TinyModelSpec.seed)
    args = parser.parse_args(argv)
    spec = TinyModelSpec(num_hidden_layers=args.layers, hidden_size=args.hidden_size, seed=args.seed)
    path = save_tiny_model(args.output_dir, spec)
    print(f"tiny model and tokenizer written to {path}")
    return 0
