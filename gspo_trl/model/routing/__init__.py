"""Mixture-of-experts routing in Hugging Face models: find the routers, then record, replay and
compare the top-k experts each token is sent to (docs/moe.md).

`family` says what a router family is; `qwen3_moe` and `mixtral` are the families (one file
each), `families` lists them and finds a model's routers, and `hooks` attaches forward hooks to
every router of a model to record, replay or compare its choices.
"""
