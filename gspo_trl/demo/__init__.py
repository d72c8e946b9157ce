"""`gspo-trl demo`: the tiny model, its warm start (warm_start.py) and the GSPO run (pipeline.py)."""
