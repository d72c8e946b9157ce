"""Worker process of the ``math`` reward: ``python -m gspo_trl.rewards._math_worker``.

Each head is a gold answer (parsed once, then cached); each item a completion text.
Every head and item runs under an interval timer of WORKER_ITEM_LIMIT_S seconds that
raises a BaseException (so math-verify's ``except Exception`` cannot swallow it); work
stuck in C code past that is killed by the parent pool. RLIMIT_AS bounds the memory one
pathological answer can take.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
from typing import Any

from gspo_trl.rewards.worker_pool import serve

LIMIT_S = float(os.environ.get("WORKER_ITEM_LIMIT_S", "5"))
MEMORY_BYTES = int(os.environ.get("WORKER_MEMORY_MB", "4096")) << 20
_GOLD_CACHE: dict[str, list[Any]] = {}
_VERDICT_CACHE: dict[str, dict[str, Any]] = {}


class ItemTimeout(BaseException):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise ItemTimeout


def _limited(fn: Any, *args: Any) -> tuple[Any, str]:
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        return fn(*args), ""
    except ItemTimeout:
        return None, "timeout"
    except (Exception, RecursionError, MemoryError) as err:
        return None, type(err).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def handle_head(gold: str) -> tuple[Any, Any]:
    from gspo_trl.rewards.math_answers import parse_gold

    if gold in _GOLD_CACHE:
        parsed, error, fresh = _GOLD_CACHE[gold], "", False
    else:
        parsed, error = _limited(parse_gold, gold)
        parsed, fresh = parsed or [], True
        if len(_GOLD_CACHE) > 4096:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[gold] = parsed
    return (gold, parsed), {"ok": bool(parsed), "parsed": _show(parsed), "fresh": fresh, "error": error}


def handle_item(head: tuple[str, list[Any]], item: dict[str, Any]) -> Any:
    """Verdict for one answer: ``item`` holds an Answer's ``target`` and ``bare`` text and
    the reward's options (``latex_shorthand``, ``checker``). The parent sends each
    distinct (gold, answer) of a call once; this cache also spans calls."""
    from gspo_trl.rewards.math_answers import integer_verdict, is_correct, parse_answer

    (gold_text, gold), target, bare = head, item["target"], item["bare"]
    if not gold:
        return {"score": None, "answer": ""}
    quick = integer_verdict(gold_text, bare)
    if quick is not None:
        return {"score": float(quick), "answer": bare.strip()}
    key = json.dumps([gold_text, item["latex_shorthand"], item["checker"], target])
    if key in _VERDICT_CACHE:
        return _VERDICT_CACHE[key]

    def judge() -> tuple[bool, list[Any]]:
        answer = parse_answer(target, item["latex_shorthand"])
        return is_correct(gold, answer, item["checker"]), answer

    result, error = _limited(judge)
    if result is None:
        return {"score": 0.0, "answer": f"[{error}]"}  # not cached: a timeout may be load, not the answer
    reply = {"score": float(result[0]), "answer": _show(result[1])}
    if len(_VERDICT_CACHE) > 65536:
        _VERDICT_CACHE.clear()
    _VERDICT_CACHE[key] = reply
    return reply


def _show(parsed: list[Any] | None) -> str:
    return str(parsed[-1])[:200] if parsed else "[unparseable]"


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    signal.signal(signal.SIGALRM, _on_alarm)
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    from gspo_trl.rewards.math_answers import parse_answer

    parse_answer("\\boxed{1}")  # imports math-verify and sympy before the first item's clock starts

    serve(handle_head, handle_item)


if __name__ == "__main__":
    main()
