"""Running untrusted code: the sandbox the ``code`` reward executes completions in.

Imports point one way, top to bottom:
* :mod:`~gspo_trl.rewards.execution.sandbox`: the public API (``run``, ``Limits``, ``resolve_mode``);
* :mod:`~gspo_trl.rewards.execution.servers`: reusable bwrap sandboxes that fork per job;
* :mod:`~gspo_trl.rewards.execution.server_state`: what must stay true of a reused server,
  checked before every reuse;
* :mod:`~gspo_trl.rewards.execution.pipes`: talking to one sandboxed process from outside;
* :mod:`~gspo_trl.rewards.execution.jail`: what every sandbox shares (limits, the bwrap command
  line, the in-sandbox code's copy);
* :mod:`~gspo_trl.rewards.execution.identity`: which uid runs the code, and killing what it leaves.
``_harness``, ``_server``, ``_pump``, ``_seccomp`` and ``_tmpfs`` run *inside* the sandbox
(standard library only, bound read-only at ``/opt/gspo``); the parent imports ``_pump`` too, so
both sides share one I/O loop.
"""
