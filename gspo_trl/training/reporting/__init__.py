"""What a run shows and keeps: the console, OUTPUT_DIR/metrics.jsonl, and step progress bars."""
